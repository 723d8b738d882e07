"""agent.py with its calculator behind MCP: an AutoGen AssistantAgent whose tools come from an
McpWorkbench on mcp_server.py, started as a subprocess over stdio. Nothing here knows Tether.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... python mcp_agent.py "Tom has 3 apples and buys 4 more. How many?"

AutoGen lists the server's tools, offers them to the model, and sends every tool call the model makes
to the server; the rest (prompt, --max-tool-iterations, the printed `Answer:` line) is agent.py's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agent import SYSTEM, argument_parser, final_line, final_reply, main, model_client
from autogen_agentchat.agents import AssistantAgent
from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams

SERVER = Path(__file__).resolve().parent / "mcp_server.py"


def server_params(args: argparse.Namespace) -> StdioServerParams:
    """The calculator server, run by this Python. The MCP SDK gives it only a minimal environment (PATH,
    HOME, ...), so the agent's API key never reaches the tool process."""
    return StdioServerParams(
        command=sys.executable, args=[str(SERVER)], read_timeout_seconds=args.mcp_timeout
    )


async def solve(question: str, args: argparse.Namespace) -> str:
    client = model_client(args)
    try:
        async with McpWorkbench(server_params(args)) as workbench:
            agent = AssistantAgent(
                "assistant",
                model_client=client,
                workbench=workbench,
                system_message=SYSTEM,
                reflect_on_tool_use=True,
                max_tool_iterations=args.max_tool_iterations,
            )
            result = await agent.run(task=question)
    finally:
        await client.close()
    reply = final_reply(result)
    print(reply, file=sys.stderr)
    return final_line(reply)


def mcp_argument_parser() -> argparse.ArgumentParser:
    parser = argument_parser(__doc__)
    parser.add_argument(
        "--mcp-timeout", type=float, default=60.0, help="seconds to wait for each answer of the MCP server"
    )
    return parser


if __name__ == "__main__":
    main(solve, mcp_argument_parser())
