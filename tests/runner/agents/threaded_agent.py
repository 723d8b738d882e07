"""An agent whose import starts a thread (`threaded_import`, on its PYTHONPATH): with --agent-warm it must
start cold, and still work."""

import sys

PRELOADED = "threaded_import" in sys.modules

import threaded_import  # noqa: E402,F401

print("preloaded" if PRELOADED else "cold")
