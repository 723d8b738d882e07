"""The calc_agent's MCP agent through the gateway: the real `mcp_agent.py` in a subprocess, its AutoGen
McpWorkbench starting the real `mcp_server.py` over stdio, and a scripted model that calls the tool.

The agent is given only the gateway's base URL and key, as `tether rollout` gives them. The model calls
`calculator`, then answers with whatever tool result it was sent, so the number in the agent's final
line can only have come from the MCP server (the agent has no calculator of its own, the script no
answer). Every model call must be recorded with the upstream's token ids.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import Response

from tests.examples.support import Example
from tests.gateway.fake_upstream import Behaviour
from tests.helpers import serve_app
from tests.integration.scripted_upstream import Script, call_tool, create_scripted_upstream, say
from tests.integration.support import Scripted, assert_recorded, recorded_tool_calls, tool_results_sent
from tests.rigs import GatewayRig, make_rig

pytestmark = pytest.mark.integration

AGENT = Example("calc_agent").dir / "mcp_agent.py"
QUESTION = "Janet's ducks lay 16 eggs a day. She eats 3, bakes with 4 and sells the rest at $2. How much?"
AGENT_TIMEOUT_S = 120


CallNext = Callable[[Request], Awaitable[Response]]


def answer_tool_results(script: Script) -> Callable[[Request, CallNext], Awaitable[Response]]:
    """Middleware for the scripted model: once the script is played out, a request carrying tool results
    gets one more turn, `Answer: <the last tool result>`."""

    async def dispatch(request: Request, call_next: CallNext) -> Response:
        messages = (await request.json()).get("messages") or []
        results = [m["content"] for m in messages if m.get("role") == "tool"]
        if results and script.next_turn() is None:
            script.turns.append(say(f"Answer: {results[-1]}"))
        return await call_next(request)

    return dispatch


@pytest.fixture
def scripted_rig(tmp_path: Path, script: Script) -> Iterator[GatewayRig]:
    """The conftest's rig, its model reading the tool results it is sent (`answer_tool_results`)."""
    upstream = create_scripted_upstream(script)
    upstream.add_middleware(BaseHTTPMiddleware, dispatch=answer_tool_results(script))
    with serve_app(upstream) as url:
        yield from make_rig(tmp_path, url + "/v1", Behaviour())


def run_agent(scripted: Scripted) -> subprocess.CompletedProcess[str]:
    """`mcp_agent.py QUESTION` with the session's credentials in its environment, as a rollout runs it."""
    session = scripted.session
    env = {**os.environ, "OPENAI_BASE_URL": session.base_url, "OPENAI_API_KEY": session.api_key}
    env.pop("TETHER_TASK", None)
    command = [sys.executable, str(AGENT), QUESTION]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=AGENT_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def offered_tool(scripted: Scripted) -> dict[str, Any]:
    [tool] = scripted.script.requests[0]["tools"]
    return tool["function"]


@pytest.mark.parametrize(
    ("expression", "result"),
    [
        ("(16 - 3 - 4) * 2", "18"),
        ("2 ** 1000", "error: exponent 1000 is too large (at most 100)"),
    ],
)
def test_the_mcp_servers_result_reaches_the_model(scripted: Scripted, expression: str, result: str) -> None:
    scripted.script.turns.append(call_tool("calculator", expression=expression))
    done = run_agent(scripted)

    assert done.stdout.splitlines()[-1] == f"Answer: {result}"
    tool = offered_tool(scripted)  # as the MCP server lists it: its schema forbids other arguments
    assert tool["name"] == "calculator" and tool["description"].startswith("Evaluate an arithmetic")
    assert tool["parameters"]["required"] == ["expression"]
    assert tool["parameters"]["additionalProperties"] is False
    spans = assert_recorded(scripted.session, scripted.script)  # every call, with the upstream's ids
    assert len(spans) == 2
    assert recorded_tool_calls(spans[0]) == [("calculator", {"expression": expression})]
    assert tool_results_sent(scripted.script, 1) == [result]
    assert spans[1].attributes["request"]["messages"][-1]["content"] == result
