"""The calculator of calculator.py as an MCP server over stdio, on the official `mcp` SDK's FastMCP.

    python mcp_server.py        # speaks MCP on stdin/stdout; an MCP client starts it as a subprocess

It offers one tool, `calculator(expression)`, whose description is the function's docstring and whose
answer is the result as text, or the calculator's error message for the model to read.
"""

from __future__ import annotations

import inspect

from calculator import calculator
from mcp.server.fastmcp import FastMCP

NAME = "calculator"


def build_server() -> FastMCP:
    server = FastMCP(NAME, log_level="WARNING")  # INFO would log every request on stderr
    server.add_tool(calculator, name="calculator", description=inspect.getdoc(calculator))
    return server


def main() -> None:
    build_server().run("stdio")


if __name__ == "__main__":
    main()
