"""An agent that draws from `random` and numpy's global generator, both imported at module level (so a
warm interpreter preloads them), and says whether numpy was loaded before it ran."""

import json
import sys

PRELOADED = "numpy" in sys.modules

import random  # noqa: E402

import numpy  # noqa: E402

print(json.dumps({"preloaded": PRELOADED, "random": random.random(), "numpy": float(numpy.random.random())}))
