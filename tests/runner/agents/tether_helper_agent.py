"""An agent whose helper module (`tether_helper`, on its PYTHONPATH) imports Tether. Warm, it must start
forked all the same, with neither Tether nor the helper preloaded (each run imports its own, as cold):
it prints which of them, and of its plain import, were loaded before it ran."""

import sys

LOADED = {name: name in sys.modules for name in ("tether", "tether_helper", "xml.dom.minidom")}

import json  # noqa: E402
import xml.dom.minidom  # noqa: E402,F401

import tether_helper  # noqa: E402

print(json.dumps({**LOADED, "helper": tether_helper.VERSION}))
