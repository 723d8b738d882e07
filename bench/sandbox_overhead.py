"""What `--sandbox bwrap` costs per rollout at start-up: one trivial agent (`true`) launched through
`CommandAgent` unsandboxed and in the bubblewrap sandbox, alternately in the same run.

    .venv/bin/python -m bench.sandbox_overhead [--launches 40]

Each sandboxed launch pays for the check-free part of the sandbox: a Unix socket and its listener on
Tether's side, bwrap's namespaces and mounts, and the in-sandbox relay (`python -I -S`) that listens on the
sandbox's loopback before it starts the agent, and, where Tether may make cgroups (as root), the
sandbox's own cgroup (made, joined, removed), and as root the step that runs bwrap as `nobody`
(`sandbox_stage.py`: a `python -I -S` of Tether's that stages the shown paths). A third agent runs in the
sandbox without the cgroup, and as root a fourth as uid 0 (`--agent-user root`), so the cgroup's share
and the unprivileged user's are measured in the same run. The one-off check at start is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from pathlib import Path

from tether.runner import LLM, CommandAgent
from tether.runner.cgroups import Cgroups
from tether.runner.sandbox import BwrapSandbox

LLM_STUB = LLM(base_url="http://127.0.0.1:9/v1", api_key="tro-bench")
# What the runner gives every agent: with TETHER_SERVER the sandbox starts its relay, as in a real rollout.
AS_ROOT = "--sandbox bwrap, --agent-user root (uid 0)"
ENV = {"TETHER_SERVER": "http://127.0.0.1:9", "OPENAI_BASE_URL": "http://127.0.0.1:9/rollouts/r/v1"}


async def launch_seconds(agent: CommandAgent) -> float:
    started = time.perf_counter()
    result = await agent.run({}, ENV, LLM_STUB, 60)
    assert result.error is None, result.stderr
    return time.perf_counter() - started


async def measure(launches: int) -> dict[str, list[float]]:
    without_cgroup = BwrapSandbox()
    without_cgroup.cgroups = Cgroups(root=Path("/nonexistent"))  # no cgroup to make: per-process limits
    agents = {
        "unsandboxed": CommandAgent("true"),
        "--sandbox bwrap": CommandAgent("true", sandbox=BwrapSandbox()),
        "--sandbox bwrap, no cgroup": CommandAgent("true", sandbox=without_cgroup),
    }
    if os.geteuid() == 0:
        agents[AS_ROOT] = CommandAgent("true", user="root", sandbox=BwrapSandbox())
    seconds: dict[str, list[float]] = {name: [] for name in agents}
    for _ in range(launches):  # in turns, so every kind sees the same machine load
        for name, agent in agents.items():
            seconds[name].append(await launch_seconds(agent))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--launches", type=int, default=40)
    args = parser.parse_args()
    seconds = asyncio.run(measure(args.launches))
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    print(
        f"cgroups made here: {'yes' if Cgroups().available() else 'no (the two sandboxed kinds are alike)'}"
    )
    print(f"| trivial agent (`true`), {args.launches} launches each | median start-to-exit | p90 |")
    print("|---|---|---|")
    for name, values in seconds.items():
        p90 = statistics.quantiles(values, n=10)[-1]
        print(f"| {name} | {medians[name] * 1000:.1f} ms | {p90 * 1000:.1f} ms |")
    plain, boxed = medians["unsandboxed"], medians["--sandbox bwrap"]
    no_cgroup = medians["--sandbox bwrap, no cgroup"]
    print(f"| ratio (sandboxed / unsandboxed, medians) | {boxed / plain:.1f}x | {_ms(boxed - plain)} |")
    print(
        f"| the cgroup's share (sandboxed / no cgroup) | {boxed / no_cgroup:.2f}x "
        f"| {_ms(boxed - no_cgroup)} |"
    )
    if AS_ROOT in medians:
        as_root = medians[AS_ROOT]
        print(
            f"| `nobody`'s share (sandboxed / as uid 0) | {boxed / as_root:.2f}x | {_ms(boxed - as_root)} |"
        )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:+.1f} ms"


if __name__ == "__main__":
    main()
