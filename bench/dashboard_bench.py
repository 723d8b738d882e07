"""The dashboard, measured in headless Chromium (Debian's `chromium`, driven by Playwright).

    .venv/bin/python -m bench.dashboard_bench paint [--rollouts 100000]
    .venv/bin/python -m bench.dashboard_bench memory [--minutes 10]

`paint`: time to first paint of the rollouts page (unfiltered, filtered, a page deep in the table) and of
a rollout with 200 spans, with N rollouts in a real SQLite store, against the same pages over a store of
1,000 rollouts in the same run (the ratio is what counts). Measured in the browser with the Performance
API: from navigation start to the page's own `tether:*-rendered` mark (its data drawn), and the browser's
first-contentful-paint. Every figure is the median of `--repeat` fresh page loads.

`memory`: `tether serve` in its own process, with the runs page open on a live run whose metrics.jsonl
gets a step a second (the page polls it once a second) and /metrics scraped every 5 s; the server's
resident memory is sampled every 10 s.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.helpers import serve_app
from tether.compose import create_app
from tether.contracts import CallAttr, Origin
from tether.dashboard import DashboardConfig
from tether.gateway import Gateway
from tether.project import Project
from tether.store import SQLiteStore
from tether.store.auth import TokenAuthority
from tether.store.records import Reward, RolloutRequest, RolloutStatus, Span, Task
from tether.trainer.metrics import MetricsLog

ROOT = Path(__file__).resolve().parent.parent
BATCH = 5000


# -- data -------------------------------------------------------------------------------------------------


def fill_store(store: SQLiteStore, count: int, seed: int = 0) -> str:
    """`count` rollouts in two runs through the store's own lifecycle (claim, reward, finish), and one
    rollout with 200 spans (100 model calls, 100 tool spans); returns that rollout's id."""
    rng = random.Random(seed)
    for start in range(0, count, BATCH):
        requests = [
            RolloutRequest(
                task=Task(id=f"task-{i % 500}", input={"question": f"what is {i} + {i}?"}),
                run="train-big" if i % 4 else "rollout-big",
                key=str(i),
                group_id=f"g{i // 8}",
            )
            for i in range(start, min(start + BATCH, count))
        ]
        store.enqueue(requests)
    while (claim := store.claim(f"node{rng.randrange(4)}/123/worker-{rng.randrange(16)}")) is not None:
        rollout = claim.rollout.id
        store.add_rewards([Reward(rollout_id=rollout, value=rng.random(), source="evaluator")])
        status = RolloutStatus.failed if rng.random() < 0.1 else RolloutStatus.succeeded
        store.update_status(rollout, status, output="42", attempt=claim.attempt.number)
    return _traced_rollout(store, rng)


def _traced_rollout(store: SQLiteStore, rng: random.Random) -> str:
    claim = store.start_session({"question": "a long agent run"})
    rollout, spans, clock = claim.rollout.id, [], time.time()
    prompt: list[int] = [rng.randrange(49152) for _ in range(300)]
    for call in range(100):
        response = [rng.randrange(49152) for _ in range(40)]
        spans.append(
            Span(
                rollout_id=rollout,
                attempt=1,
                name="llm.chat",
                start_time=clock,
                end_time=clock + 0.4,
                origin=Origin.GATEWAY,
                attributes={
                    CallAttr.MODEL: "policy",
                    CallAttr.AGENT: "solver",
                    CallAttr.LATENCY_MS: 400.0,
                    CallAttr.POLICY_VERSION: 3,
                    CallAttr.PROMPT_TOKEN_IDS: list(prompt),
                    CallAttr.CHOICES: [
                        {
                            "index": 0,
                            "text": "x" * 120,
                            "finish_reason": "stop",
                            "token_ids": response,
                            "logprobs": [-rng.random() for _ in response],
                        }
                    ],
                    CallAttr.REQUEST: {"messages": [{"role": "user", "content": "q" * 800}]},
                },
            )
        )
        spans.append(
            Span(
                rollout_id=rollout,
                attempt=1,
                name=f"tool:step{call}",
                start_time=clock + 0.4,
                end_time=clock + 0.45,
                attributes={"tool": "calculator", "input": "1+1"},
            )
        )
        prompt += response + [rng.randrange(49152) for _ in range(20)]
        clock += 0.5
    store.add_spans(spans)
    store.update_status(rollout, RolloutStatus.succeeded, output="done", attempt=1)
    return rollout


# -- browser ----------------------------------------------------------------------------------------------


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        raise SystemExit("bench: Debian's chromium is needed (bash scripts/ensure_chromium.sh)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def first_paint(browser: Any, url: str, token: str, mark: str) -> tuple[float, float]:
    """(ms to the page's `mark`, ms to first-contentful-paint) of one fresh load of `url`."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.add_init_script(f"sessionStorage.setItem('tether.token', {token!r})")
    page = context.new_page()
    page.goto(url)
    page.wait_for_function(f"performance.getEntriesByName('{mark}').length > 0", timeout=120_000)
    drawn = page.evaluate(f"performance.getEntriesByName('{mark}')[0].startTime")
    paint = page.evaluate(
        "(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: NaN}).startTime"
    )
    context.close()
    return float(drawn), float(paint)


def measure_pages(
    browser: Any, base: str, token: str, traced: str, repeat: int
) -> dict[str, tuple[float, float]]:
    pages = {
        "rollouts page": ("#/rollouts", "tether:rollouts-rendered"),
        "rollouts, filtered (run, status, reward >= 0.5)": (
            "#/rollouts?run=train-big&status=succeeded&reward_min=0.5",
            "tether:rollouts-rendered",
        ),
        "rollouts, page at offset 50,000": ("#/rollouts?offset=50000", "tether:rollouts-rendered"),
        "rollout with 200 spans": (f"#/rollout/{traced}", "tether:rollout-rendered"),
    }
    results = {}
    for name, (path, mark) in pages.items():
        first_paint(browser, f"{base}/ui/{path}", token, mark)  # warm the server's caches once
        runs = [first_paint(browser, f"{base}/ui/{path}", token, mark) for _ in range(repeat)]
        results[name] = (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
    return results


@contextmanager
def dashboard_over(count: int, folder: Path) -> Iterator[tuple[str, str, str]]:
    store = SQLiteStore(folder / f"store-{count}.db")
    started = time.monotonic()
    traced = fill_store(store, count)
    print(f"  {count} rollouts stored in {time.monotonic() - started:.0f} s", file=sys.stderr)
    authority = TokenAuthority.generate()
    gateway = Gateway(store, authority)
    try:
        with serve_app(create_app(gateway, DashboardConfig())) as url:
            yield url, authority.viewer_token, traced
    finally:
        gateway.recorder.close()
        store.close()


def paint(args: argparse.Namespace) -> None:
    results: dict[int, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp, chromium() as browser:
        for count in (1000, args.rollouts):
            with dashboard_over(count, Path(tmp)) as (url, token, traced):
                results[count] = measure_pages(browser, url, token, traced, args.repeat)
    small, big = results[1000], results[args.rollouts]
    print(f"| page | {args.rollouts:,} rollouts: data drawn / first paint | 1,000 rollouts | ratio |")
    print("|---|---|---|---|")
    for name, (drawn, fcp) in big.items():
        base_drawn, base_fcp = small[name]
        print(
            f"| {name} | {drawn:.0f} ms / {fcp:.0f} ms | {base_drawn:.0f} ms / {base_fcp:.0f} ms "
            f"| {drawn / base_drawn:.2f}x |"
        )


# -- memory -----------------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


@contextmanager
def serve_process(project_dir: Path) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    command = [
        sys.executable,
        "-m",
        "tether.cli.main",
        "serve",
        "--upstream",
        "http://127.0.0.1:9/v1",
        "--no-session",
        "--port",
        "0",
        "--project-dir",
        str(project_dir),
    ]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert server.stdout is not None
        url = ""
        for line in server.stdout:
            if line.startswith("Tether gateway on "):
                url = line.split()[3]
            if line.strip() == "ready":
                break
        yield url, server
    finally:
        server.terminate()
        server.wait(30)


def memory(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, chromium() as browser:
        project = Project.at(tmp)
        log = MetricsLog(project.state_dir / "runs" / "live")
        log.write({"kind": "val", "step": 0, "val_score": 0.0})
        with serve_process(Path(tmp)) as (url, server):
            token = project.authority().viewer_token
            context = browser.new_context()
            context.add_init_script(f"sessionStorage.setItem('tether.token', {token!r})")
            page = context.new_page()
            page.goto(f"{url}/ui/#/runs")
            page.wait_for_selector("#chart canvas", timeout=120_000)
            samples = []
            started = time.monotonic()
            step = 0
            while (elapsed := time.monotonic() - started) < args.minutes * 60:
                step += 1
                log.write({"kind": "train", "step": step, "reward_mean": random.random(), "reward_std": 0.1})
                if step % 5 == 0:
                    httpx.get(
                        f"{url}/metrics", headers={"Authorization": f"Bearer {token}"}
                    ).raise_for_status()
                if step % 10 == 1:
                    samples.append((elapsed, rss_kib(server.pid)))
                    print(f"  {elapsed:5.0f} s  {samples[-1][1] / 1024:.1f} MiB", file=sys.stderr, flush=True)
                time.sleep(1.0)
            points = int(page.get_attribute("#chart", "data-points") or 0)
            context.close()
        log.close()
    first, last = samples[0][1] / 1024, samples[-1][1] / 1024
    peak = max(kib for _, kib in samples) / 1024
    print(
        f"server RSS over {elapsed / 60:.1f} min of a live run ({step} steps streamed, {points} points "
        f"drawn): {first:.1f} MiB at start, {last:.1f} MiB at the end, peak {peak:.1f} MiB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="what", required=True)
    paint_parser = sub.add_parser("paint")
    paint_parser.add_argument("--rollouts", type=int, default=100_000)
    paint_parser.add_argument("--repeat", type=int, default=5)
    memory_parser = sub.add_parser("memory")
    memory_parser.add_argument("--minutes", type=float, default=10.0)
    args = parser.parse_args()
    if args.what == "paint":
        paint(args)
    else:
        memory(args)


if __name__ == "__main__":
    main()
