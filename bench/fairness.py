"""Fair scheduling across rollouts: a rollout's one-token request while two others keep the batch full.

    .venv/bin/python -m bench.fairness [--runs 3]                 # the working tree's engine
    .venv/bin/python -m bench.fairness --runs 3 --before 8424f38  # and first-come-first-served, as it was

The scenario of tests/engines/test_fairness.py, on tiny-random (CPU, `max_batch_size=8`): two owners
keep 8 generations of 300 tokens each in flight (the batch full, 8 more waiting), and four other owners
send a one-token request at once, three rounds; the same rounds on the idle engine, in the same run, are
the baseline. Reported per run: the median short-request latency unloaded and under load, and their
ratio. `--before REV` runs the same scenario, in the same invocation, against the engine of commit REV
(bench/trees.py); 8424f38 is the first-come-first-served admission the "before" column of
docs/benchmarks.md measured. An engine whose `stream` takes no `owner` is called without one (the figures
of docs/benchmarks.md used 8424f38's engine taught to accept and ignore it: the same admission).

Each run is its own process, which imports the tether of the tree it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parent.parent
BATCH = 8
LONG_TOKENS = 300
ROUNDS = 3
LIGHT_OWNERS = 4
HEAVY_OWNERS = ("heavy-a", "heavy-b")

# -- the measurement, in a process that imports the tree under test -----------------------------------


def _owner_kwargs(engine: Any, owner: str) -> dict[str, str]:
    import inspect

    return {"owner": owner} if "owner" in inspect.signature(engine.stream).parameters else {}


async def _wait_idle(engine: Any) -> None:
    lock = getattr(engine, "_model_lock", None)
    while lock is not None and lock.locked():
        await asyncio.sleep(0.01)


async def _scenario(engine: Any) -> dict[str, float]:
    from tether.engines import GenerationDone, SamplingParams

    long = SamplingParams(max_tokens=LONG_TOKENS, temperature=0)
    short = SamplingParams(max_tokens=1, temperature=0)
    short_prompt = engine.chat_prompt_ids([{"role": "user", "content": "short"}])
    long_prompt = engine.chat_prompt_ids([{"role": "user", "content": "write a long story"}])

    async def one(owner: str) -> float:
        start = time.perf_counter()
        async for item in engine.stream(short_prompt, short, **_owner_kwargs(engine, owner)):
            if isinstance(item, GenerationDone):
                break
        return time.perf_counter() - start

    async def round_() -> list[float]:
        return list(await asyncio.gather(*(one(f"light-{i}") for i in range(LIGHT_OWNERS))))

    await _wait_idle(engine)
    await round_()  # warm-up
    unloaded = [t for _ in range(ROUNDS) for t in await round_()]

    full = asyncio.Event()
    first_tokens = 0
    finished = 0

    async def keep_busy(owner: str) -> None:
        nonlocal first_tokens, finished
        while True:
            first = True
            async for item in engine.stream(long_prompt, long, **_owner_kwargs(engine, owner)):
                if first:
                    first = False
                    first_tokens += 1
                    if first_tokens >= engine.max_batch_size:
                        full.set()
                if isinstance(item, GenerationDone):
                    finished += 1

    tasks = [asyncio.create_task(keep_busy(o)) for o in HEAVY_OWNERS for _ in range(engine.max_batch_size)]
    try:
        await full.wait()
        loaded = [t for _ in range(ROUNDS) for t in await round_()]
        finished_meanwhile = finished
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await _wait_idle(engine)
    return {
        "unloaded_ms": statistics.median(unloaded) * 1000,
        "loaded_ms": statistics.median(loaded) * 1000,
        "ratio": statistics.median(loaded) / statistics.median(unloaded),
        "long_finished_meanwhile": float(finished_meanwhile),
    }


def worker(model_path: str) -> None:
    from tether.engines.transformers_engine import TransformersEngine

    engine = TransformersEngine(model_path, name="tiny-random", max_batch_size=BATCH)
    try:
        print(json.dumps(asyncio.run(_scenario(engine))), flush=True)
    finally:
        engine.close()


# -- the driver ------------------------------------------------------------------------------------------


def _run_once(tree: Path, model_path: Path) -> dict[str, float]:
    from bench.trees import tree_env

    code = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    env = tree_env(tree) if tree != ROOT else None
    done = subprocess.run(
        [sys.executable, "-c", code, str(HERE), "--worker", str(model_path)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the scenario failed in {tree}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _span(values: list[float], digits: int) -> str:
    low, high = min(values), max(values)
    return (
        f"{low:.{digits}f}"
        if f"{low:.{digits}f}" == f"{high:.{digits}f}"
        else f"{low:.{digits}f} - {high:.{digits}f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="separate runs per engine (each its own process)")
    parser.add_argument("--before", metavar="REV", default=None, help="also measure the engine of commit REV")
    parser.add_argument("--worker", metavar="MODEL_PATH", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return 0

    import shutil

    from bench import trees
    from tether.models.catalog import TINY_RANDOM, resolve_model

    model_path = resolve_model(TINY_RANDOM)
    columns: list[tuple[str, Path]] = []
    exported: Path | None = None
    if args.before:
        exported = trees.export(args.before)
        columns.append((f"before: {args.before}", exported))
    columns.append(("after: working tree", ROOT))
    results: dict[str, list[dict[str, float]]] = {label: [] for label, _ in columns}
    try:
        for run in range(args.runs):  # the engines take turns, so a burst of other work hits both
            for label, tree in columns:
                figures = _run_once(tree, model_path)
                results[label].append(figures)
                print(
                    f"[fairness] run {run + 1} {label}: unloaded {figures['unloaded_ms']:.1f} ms, "
                    f"under load {figures['loaded_ms']:.1f} ms, ratio {figures['ratio']:.1f}x",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        if exported is not None:
            shutil.rmtree(exported, ignore_errors=True)
    print("\n| | " + " | ".join(f"{label} ({args.runs} runs)" for label, _ in columns) + " |")
    print("|---|" + "---|" * len(columns))
    rows = [
        ("short-request latency, under load / unloaded (x)", "ratio", 1),
        ("short-request latency under load (ms)", "loaded_ms", 1),
        ("short-request latency unloaded (ms)", "unloaded_ms", 1),
        ("long generations finished meanwhile", "long_finished_meanwhile", 0),
    ]
    for title, key, digits in rows:
        cells = [_span([r[key] for r in results[label]], digits) for label, _ in columns]
        print(f"| {title} | " + " | ".join(cells) + " |")
    print(f"\nranges over runs; tiny-random, max_batch_size={BATCH}, {LONG_TOKENS}-token long generations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
