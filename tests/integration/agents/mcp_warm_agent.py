"""The calc example's MCP agent (examples/calc_agent/mcp_agent.py, unchanged: its AutoGen McpWorkbench
starts mcp_server.py as a stdio child) for the warm-start framework test. It prints whether AutoGen's MCP
tools were loaded before this script imported them, then the task."""

import sys

PRELOADED = "autogen_ext.tools.mcp" in sys.modules

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

from autogen_ext.tools.mcp import McpWorkbench  # noqa: E402,F401  (what a warm interpreter preloads)

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "calc_agent"))

import mcp_agent  # noqa: E402

task = json.loads(os.environ["TETHER_TASK"])
args = mcp_agent.mcp_argument_parser().parse_args([task["q"], "--max-tokens", "8"])
answer = asyncio.run(mcp_agent.solve(task["q"], args))
print("warm" if PRELOADED else "cold", task["q"], bool(answer))
