"""Two trees' gateways side by side: throughput and CPU per call of a commit against the working tree.

    .venv/bin/python -m bench.gateway_ab --before e50142c [--rounds 6] [--calls 1500]
    .venv/bin/python -m bench.gateway_ab --before 68ad81e --after 8d97344

Both gateways are served at once, each from its own tree (bench/trees.py: the revision's own
`bench.gateway_overhead.gateway_main` and its own `tether`), in front of the same fake upstream
(bench/gateway_overhead.py: 512 prompt / 128 response token ids with logprobs). Rounds alternate which
goes first (`before, after`, then `after, before`); each round sends `--calls` calls with `--clients`
clients to one gateway, then to the other. Per round: each gateway's throughput, and its CPU per call
(user + system time of its process over the round, from /proc). Reported: after / before of both,
median over rounds with the interquartile range and the whole range, and each gateway's median req/s.

This is how the side-by-side figures of docs/benchmarks.md ("Gateway after the M7 seams", "Gateway
request validation") are measured; a round's ratio moves by up to 20% either way on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import trees
from bench.gateway_overhead import free_port, load, wait_port

ROOT = Path(__file__).resolve().parent.parent
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime: fields 14 and 15 of stat


@dataclass
class Served:
    label: str
    tree: Path
    process: subprocess.Popen[bytes]
    url: str
    key: str
    project: Path
    throughput: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)


def serve(label: str, tree: Path, upstream_url: str) -> Served:
    """The tree's gateway, from the tree's own bench/gateway_overhead.py, recording into a fresh store."""
    project = tempfile.mkdtemp(prefix=f"tether-ab-{label}-")
    port = free_port()
    code = f"from bench.gateway_overhead import *; gateway_main({port}, {upstream_url!r}, {project!r})"
    env = trees.tree_env(tree) if tree != ROOT else None
    process = subprocess.Popen([sys.executable, "-c", code], cwd=tree, env=env)
    wait_port(port)
    creds = Path(project) / "creds"
    while not creds.exists() or len(creds.read_text().split()) < 2:
        time.sleep(0.05)
    rollout_id, key = creds.read_text().split()
    return Served(
        label, tree, process, f"http://127.0.0.1:{port}/rollouts/{rollout_id}/v1/chat/completions", key
    )


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    if len(ordered) >= 4:
        q1, _, q3 = statistics.quantiles(ordered, n=4)
        inner = f"{q1:.2f} - {q3:.2f}; "
    else:
        inner = ""
    return f"{statistics.median(ordered):.3f} ({inner}{ordered[0]:.2f} - {ordered[-1]:.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", metavar="REV", required=True, help="the commit to compare against")
    parser.add_argument("--after", metavar="REV", default=None, help="default: the working tree")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=1500)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    exported = [trees.export(args.before)]
    if args.after:
        exported.append(trees.export(args.after))
    after_tree = exported[1] if args.after else ROOT
    up_port = free_port()
    upstream = subprocess.Popen(
        [sys.executable, "-c", f"from bench.gateway_overhead import *; fake_upstream_main({up_port})"],
        cwd=ROOT,
    )
    gateways: list[Served] = []
    try:
        wait_port(up_port)
        upstream_url = f"http://127.0.0.1:{up_port}/v1"
        before = serve("before", exported[0], upstream_url)
        gateways.append(before)
        after = serve("after", after_tree, upstream_url)
        gateways.append(after)
        for served in gateways:
            asyncio.run(load(served.url, served.key, 200, 4))  # warm-up
        for index in range(args.rounds):
            for served in (before, after) if index % 2 == 0 else (after, before):
                cpu = cpu_seconds(served.process.pid)
                _, throughput = asyncio.run(load(served.url, served.key, args.calls, args.clients))
                served.cpu_us.append((cpu_seconds(served.process.pid) - cpu) / args.calls * 1e6)
                served.throughput.append(throughput)
            print(
                f"[gateway_ab] round {index + 1}: before {before.throughput[-1]:.0f} req/s "
                f"{before.cpu_us[-1]:.0f} us/call, after {after.throughput[-1]:.0f} req/s "
                f"{after.cpu_us[-1]:.0f} us/call",
                file=sys.stderr,
                flush=True,
            )
    finally:
        for served in gateways:
            served.process.terminate()
            served.process.wait(timeout=30)
            shutil.rmtree(served.project, ignore_errors=True)
        upstream.terminate()
        upstream.wait(timeout=30)
        for folder in exported:
            shutil.rmtree(folder, ignore_errors=True)
    tput = [a / b for a, b in zip(after.throughput, before.throughput, strict=True)]
    cpu = [a / b for a, b in zip(after.cpu_us, before.cpu_us, strict=True)]
    after_name = args.after or "the working tree"
    print(
        f"\nafter ({after_name}) / before ({args.before}), {args.rounds} rounds of {args.calls} calls, "
        f"{args.clients} clients; median (interquartile; range)\n"
    )
    print("| after / before | ratio |\n|---|---|")
    print(f"| throughput | {spread(tput)} |")
    print(f"| gateway CPU per call | {spread(cpu)} |")
    print(
        f"| gateway throughput, median req/s before -> after | {statistics.median(before.throughput):.0f} -> "
        f"{statistics.median(after.throughput):.0f} |"
    )
    print(
        f"| gateway CPU per call, median us before -> after | {statistics.median(before.cpu_us):.0f} -> "
        f"{statistics.median(after.cpu_us):.0f} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
