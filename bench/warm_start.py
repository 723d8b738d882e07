"""What `--agent-warm` saves per rollout: the time from launching an agent to its first model call, cold
(`python agent.py`) and forked from a warm interpreter, for the demo agent (the `openai` client) and the
SQL example (LangGraph and LangChain), launched alternately in the same run; with `--sandbox`, both
under `--sandbox bwrap` (cold: a bwrap per rollout; warm: forked from a zygote in its own sandbox, each
child confining itself).

    .venv/bin/python -m bench.warm_start [--launches 20] [--sandbox]

The agents call a loopback stub that notes when each first request arrives and answers 400, which the
clients do not retry, so each agent stops there (its error is expected); nothing else is timed. The
zygote's own start (its imports, once per command) is reported apart and not counted per launch.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tether.runner import LLM, CommandAgent
from tether.runner.sandbox import BwrapSandbox, Sandbox, SandboxOptions
from tether.runner.warm import WarmStarts

ROOT = Path(__file__).parents[1]
AGENTS = {
    "demo agent (openai)": (ROOT / "examples" / "arith_agent" / "agent.py", {"question": "What is 2 + 3?"}),
    "SQL agent (LangGraph)": (
        ROOT / "examples" / "sql_agent" / "agent.py",
        {"question": "How many artists are there?", "db": ""},  # the cached Chinook database, at start
    ),
}


class FirstCalls:
    """A loopback stub: when each rollout's first request (told apart by its path) arrived; answers 400."""

    def __init__(self) -> None:
        self.arrivals: dict[str, float] = {}
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                stub.arrivals.setdefault(self.path.strip("/").split("/v1")[0], time.perf_counter())
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(400)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


async def first_call_seconds(agent: CommandAgent, task: dict[str, str], stub: FirstCalls, key: str) -> float:
    base = f"{stub.url}/{key}/v1"
    env = {
        "TETHER_TASK": json.dumps(task),
        "OPENAI_BASE_URL": base,
        "OPENAI_API_KEY": "tro-bench",
    }
    started = time.perf_counter()
    result = await agent.run(task, env, LLM(base, "tro-bench"), 120)
    if key not in stub.arrivals:
        raise RuntimeError(f"the agent made no model call: {result.error}\n{result.stderr[-2000:]}")
    return stub.arrivals[key] - started


async def measure(launches: int, sandboxed: bool) -> dict[str, dict[str, list[float] | float]]:
    stub = FirstCalls()
    results: dict[str, dict[str, list[float] | float]] = {}
    for index, (name, (script, task)) in enumerate(AGENTS.items()):
        warm = WarmStarts()
        cold_agent = CommandAgent(f"{sys.executable} {script}", sandbox=sandbox(sandboxed))
        warm_agent = CommandAgent(f"{sys.executable} {script}", warm=warm, sandbox=sandbox(sandboxed))
        zygote_start = time.perf_counter()
        await first_call_seconds(warm_agent, task, stub, f"a{index}-first")  # starts the zygote
        zygote_seconds = time.perf_counter() - zygote_start
        cold: list[float] = []
        hot: list[float] = []
        for i in range(launches):  # alternated, so both see the same machine load
            cold.append(await first_call_seconds(cold_agent, task, stub, f"a{index}-cold-{i}"))
            hot.append(await first_call_seconds(warm_agent, task, stub, f"a{index}-warm-{i}"))
        if warm.cold or warm.forked != launches + 1:
            raise RuntimeError(f"{name}: not every warm launch was warm ({warm.cold or warm.forked})")
        warm.close()
        results[name] = {"cold": cold, "warm": hot, "zygote_first": zygote_seconds}
    stub.server.shutdown()
    return results


def sandbox(sandboxed: bool) -> Sandbox | None:
    return BwrapSandbox(SandboxOptions()) if sandboxed else None


def sql_database() -> None:
    sys.path.insert(0, str(ROOT / "examples" / "sql_agent"))
    from chinook import database_path  # type: ignore[import-not-found]

    AGENTS["SQL agent (LangGraph)"][1]["db"] = str(database_path())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--sandbox", action="store_true", help="both under --sandbox bwrap")
    args = parser.parse_args()
    sql_database()
    results = asyncio.run(measure(args.launches, args.sandbox))
    where = ", in --sandbox bwrap" if args.sandbox else ""
    print(
        f"| agent, {args.launches} launches each{where} | cold: median to first call | warm | cold / warm |"
    )
    print("|---|---|---|---|")
    for name, values in results.items():
        cold = statistics.median(values["cold"])  # type: ignore[arg-type]
        hot = statistics.median(values["warm"])  # type: ignore[arg-type]
        print(f"| {name} | {cold * 1000:.0f} ms | {hot * 1000:.0f} ms | {cold / hot:.1f}x |")
    for name, values in results.items():
        print(f"{name}: the zygote's first launch (its imports included) took {values['zygote_first']:.2f} s")


if __name__ == "__main__":
    main()
