"""`import tether` is light and changes nothing in the importing process (an agent reporting rewards)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, os, sys
import tether
from tether import emit_reward, span
names = ("pydantic", "httpx", "fastapi", "torch", "tether.store", "tether.runner")
heavy = [m for m in names if m in sys.modules]
print(json.dumps({"omp": os.environ.get("OMP_WAIT_POLICY"), "heavy": heavy, "store": tether.Store.__name__}))
"""


def test_importing_tether_loads_nothing_heavy_and_sets_no_environment() -> None:
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result["omp"] is None
    assert result["heavy"] == []
    assert result["store"] == "Store"  # the protocol is what the top level exports


def test_the_engine_module_makes_openmp_wait_passively_before_torch_loads() -> None:
    code = "import os, tether.engines.transformers_engine; print(os.environ['OMP_WAIT_POLICY'])"
    env = {key: value for key, value in os.environ.items() if key != "OMP_WAIT_POLICY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "PASSIVE"
