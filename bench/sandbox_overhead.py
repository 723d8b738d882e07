"""What `--sandbox bwrap` costs per rollout at start-up: one trivial agent (`true`) launched through
`CommandAgent` unsandboxed and in the bubblewrap sandbox, alternately in the same run.

    .venv/bin/python -m bench.sandbox_overhead [--launches 40]

Each sandboxed launch pays for the check-free part of the sandbox: a Unix socket and its listener on
Tether's side, bwrap's namespaces and mounts, and the in-sandbox relay (`python -I -S`) that listens on the
sandbox's loopback before it starts the agent. The one-off check at start is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from tether.runner import LLM, CommandAgent
from tether.runner.sandbox import BwrapSandbox

LLM_STUB = LLM(base_url="http://127.0.0.1:9/v1", api_key="tro-bench")
# What the runner gives every agent: with TETHER_SERVER the sandbox starts its relay, as in a real rollout.
ENV = {"TETHER_SERVER": "http://127.0.0.1:9", "OPENAI_BASE_URL": "http://127.0.0.1:9/rollouts/r/v1"}


async def launch_seconds(agent: CommandAgent) -> float:
    started = time.perf_counter()
    result = await agent.run({}, ENV, LLM_STUB, 60)
    assert result.error is None, result.stderr
    return time.perf_counter() - started


async def measure(launches: int) -> tuple[list[float], list[float]]:
    plain, boxed = CommandAgent("true"), CommandAgent("true", sandbox=BwrapSandbox())
    bare: list[float] = []
    sandboxed: list[float] = []
    for _ in range(launches):  # alternated, so both see the same machine load
        bare.append(await launch_seconds(plain))
        sandboxed.append(await launch_seconds(boxed))
    return bare, sandboxed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=40)
    args = parser.parse_args()
    bare, sandboxed = asyncio.run(measure(args.launches))
    plain, boxed = statistics.median(bare), statistics.median(sandboxed)
    print(f"| trivial agent (`true`), {args.launches} launches each | median start-to-exit | p90 |")
    print("|---|---|---|")
    for name, values in (("unsandboxed", bare), ("--sandbox bwrap", sandboxed)):
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"| {name} | {statistics.median(values) * 1000:.1f} ms | {p90 * 1000:.1f} ms |")
    extra = (boxed - plain) * 1000
    print(f"| ratio (sandboxed / unsandboxed, medians) | {boxed / plain:.1f}x | +{extra:.1f} ms |")


if __name__ == "__main__":
    main()
