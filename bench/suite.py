"""Each benchmark of `python -m bench`: measure ours and the references, append rows to the context."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from bench import refenv
from bench.gateway_overhead import free_port, wait_port
from bench.report import Row, Value, not_run

if TYPE_CHECKING:
    from bench.__main__ import Context

AGL03 = "AGL 0.3.0 LLM proxy"
AGL1 = "AGL 1.x gateway"


class FakeUpstream:
    """The fast fake OpenAI upstream of bench/gateway_overhead.py, in its own process."""

    def __enter__(self) -> FakeUpstream:
        self.port = free_port()
        code = f"from bench.gateway_overhead import *; fake_upstream_main({self.port})"
        self.process = subprocess.Popen([sys.executable, "-c", code])
        wait_port(self.port)
        self.url = f"http://127.0.0.1:{self.port}/v1"
        return self

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def _reference_targets(ctx: Context, upstream: str) -> list[tuple[str, Callable[[], object]]]:
    from bench import proxy_bench

    def agl03() -> object:
        return proxy_bench.start_reference("agl03", ctx.agl(), "agl_proxy.py", upstream, refenv.agl_env())

    def agl1() -> object:
        src = ctx.agl1()
        env = {**refenv.agl_env(), "PYTHONPATH": str(src)}
        return proxy_bench.start_reference("agl1", ctx.agl(), "agl1_gateway.py", upstream, env)

    return [(AGL03, agl03), (AGL1, agl1)]


def gateway(ctx: Context) -> None:
    from bench import proxy_bench

    s = ctx.sizes
    figures: dict[str, proxy_bench.Figures | str] = {}
    with FakeUpstream() as upstream:
        direct_url = upstream.url + "/chat/completions"
        starters: list[tuple[str, Callable[[], object]]] = [
            (
                "direct",
                lambda: proxy_bench.Target(
                    "direct", upstream.process, upstream.url + "/chat/completions", "x"
                ),
            ),
            ("floor", lambda: proxy_bench.start_floor(upstream.url)),
            ("ours", lambda: proxy_bench.start_ours(upstream.url)),
            *_reference_targets(ctx, upstream.url),
        ]
        for name, start in starters:
            try:
                target = start()
            except Exception as exc:  # noqa: BLE001 - the row says why
                figures[name] = not_run(exc)
                continue
            try:
                figures[name] = proxy_bench.measure(
                    target, s.latency_calls, s.throughput_calls, s.recorded_calls, direct_url
                )
            except Exception as exc:  # noqa: BLE001 - the row says why
                figures[name] = not_run(exc)
            finally:
                if name != "direct":
                    proxy_bench.stop(target)
    direct = figures["direct"]
    if isinstance(direct, str):
        raise RuntimeError(f"the fake upstream itself failed: {direct}")
    _gateway_rows(ctx, figures, direct)


def _gateway_rows(ctx: Context, figures: dict, direct) -> None:  # noqa: ANN001
    def value(name: str, get: Callable[[object], Value]) -> Value:
        fig = figures.get(name)
        return fig if isinstance(fig, str) else get(fig)

    section = "gateway (fake upstream, 512/128 tokens, logprobs)"
    metrics: list[tuple[str, str, Callable[[object], Value], bool]] = [
        ("added p50 latency, 1 client", "ms", lambda f: f.added_p50_ms, False),
        ("added p99 latency, 1 client", "ms", lambda f: f.added_p99_ms, False),
        ("throughput, 16 clients", "req/s", lambda f: f.tput16, True),
        ("throughput, 64 clients", "req/s", lambda f: f.tput64, True),
        ("RSS growth per recorded call (memory the process keeps)", "KiB", lambda f: f.kib_per_call, False),
    ]
    for metric, unit, get, higher in metrics:
        ctx.rows.append(
            Row(
                section,
                metric,
                unit,
                value("ours", get),
                {name: value(name, get) for name in (AGL03, AGL1)},
                value("floor", get),
                higher,
            )
        )

    def on_disk(f: object) -> Value:
        kib = f.disk_kib_per_call
        return "in memory only: no store file" if kib is None else kib

    ctx.rows.append(
        Row(
            section,
            "store file growth per recorded call (on disk; SQLite after a WAL checkpoint)",
            "KiB",
            value("ours", on_disk),
            {name: value(name, on_disk) for name in (AGL03, AGL1)},
            "records nothing",
            False,
        )
    )

    def recorded(f: object) -> str:
        return f"{f.recorded} of {f.calls}"

    ctx.rows.append(
        Row(
            section,
            "records kept / calls made",
            "",
            value("ours", recorded),
            {name: value(name, recorded) for name in (AGL03, AGL1)},
            "records nothing",
            True,
        )
    )
    ctx.notes.append(
        f"gateway: direct to the fake upstream {direct.tput16:.0f} req/s with 16 clients, "
        f"{direct.tput64:.0f} req/s with 64; 'added' latency is each proxy's minus the upstream's, measured "
        "alternately in chunks of 25 calls. Floor: a bare aiohttp pass-through proxy that records nothing. "
        "Records: ours, span rows in SQLite; AGL 0.3.0, calls with spans in its store (LiteLLM exports "
        "several per call); AGL 1.x, its model_request events. 'calls made' includes 100 warm-up calls."
    )


def store(ctx: Context) -> None:
    import tempfile
    from pathlib import Path

    from bench import store_bench

    s = ctx.sizes
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-store-"))
    ours_local = store_bench.in_process(folder, s.store_n, s.wake_samples)
    ours_http = store_bench.over_http(folder, s.store_n, s.wake_samples)
    theirs: dict[str, dict[str, float] | str] = {}
    try:
        theirs = _agl_store(ctx, s.store_n, s.wake_samples)
    except Exception as exc:  # noqa: BLE001 - the rows say why
        theirs = {"in process": not_run(exc), "over HTTP": not_run(exc)}
    section = "store (one record per call)"
    fields = [
        ("rollouts enqueued+claimed", "rollouts_per_s", "/s", True),
        ("spans written", "spans_per_s", "/s", True),
        ("rewards written", "rewards_per_s", "/s", True),
        ("rollout end -> waiter knows, p50", "wake_p50_ms", "ms", False),
    ]
    for where, ours in (("in process", ours_local), ("over HTTP", ours_http)):
        other = theirs.get(where, "not measured")
        for label, attr, unit, higher in fields:
            theirs_value: Value = other if isinstance(other, str) else other.get(attr, "not measured")
            ctx.rows.append(
                Row(
                    section,
                    f"{label}, {where}",
                    unit,
                    getattr(ours, attr),
                    {"AGL 0.3.0 in-memory store": theirs_value},
                    None,
                    higher,
                )
            )
    ctx.notes.append(
        "store: ours is durable (SQLite file, WAL, committed before returning); Agent Lightning 0.3.0's "
        "InMemoryLightningStore keeps everything in memory. Over HTTP: ours StoreClient -> store API, theirs "
        "LightningStoreClient -> LightningStoreServer, both on loopback in the same process."
    )


def _agl_store(ctx: Context, n: int, wake_samples: int) -> dict[str, dict[str, float] | str]:
    import json

    from bench.proxy_bench import HERE

    python = ctx.agl()
    args = [str(python), str(HERE / "agl_store.py"), str(n), str(wake_samples)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=1800, env=refenv.agl_env())
    if done.returncode != 0:
        raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1][-240:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def async_vs_sync(ctx: Context) -> None:
    import random

    from bench.async_vs_sync import timed_fit

    random.seed(0)
    steps = ctx.sizes.async_steps
    sync_s = timed_fit("tiny-random", steps, 1.0, async_mode=False)
    async_s = timed_fit("tiny-random", steps, 1.0, async_mode=True)
    ctx.rows.append(
        Row(
            "training wall-clock",
            f"{steps} updates, tiny-random, tool latency ~1 s: async (max staleness 1)",
            "s",
            async_s,
            {"ours, sync mode (same samples)": sync_s},
            None,
            False,
            note="the reference column here is our own sync mode",
        )
    )


def trainer(ctx: Context) -> None:
    from bench import trainer_bench

    steps = ctx.sizes.trainer_steps
    ours = trainer_bench.ours_tokens_per_s("tiny-random", steps)
    try:
        python = refenv.ensure_trl(ctx.log)
        theirs_value, version = trainer_bench.trl_tokens_per_s(python, "tiny-random", steps)
        ctx.versions["trl"] = version
        ctx.versions["torch (TRL venv)"] = _torch_of(python)
        theirs: Value = theirs_value
    except Exception as exc:  # noqa: BLE001 - the row says why
        theirs = not_run(exc)
    b = trainer_bench
    ctx.rows.append(
        Row(
            "trainer update",
            f"tokens/s, tiny-random, LoRA r=16, {b.SAMPLES} x ({b.PROMPT}+{b.RESPONSE}) tokens, fp32 CPU",
            "tok/s",
            ours,
            {"TRL SFTTrainer step": theirs},
            None,
            True,
            note="same forward tokens; TRL's SFT loss covers every token, ours only response tokens",
        )
    )


def _torch_of(python) -> str:  # noqa: ANN001
    from bench.report import venv_version

    return venv_version(python, "torch")


def load(ctx: Context) -> None:
    from bench import load_test

    s = ctx.sizes
    with FakeUpstream() as upstream:
        result = load_test.run(s.load_agents, s.load_seconds, upstream.url)
    section = f"load test ({result.agents} agents, {result.seconds:.0f} s, gateway + SQLite store)"
    ctx.rows.append(Row(section, "errors", "", float(len(result.errors)), note=f"{result.sessions} sessions"))
    ctx.rows.append(
        Row(
            section,
            "lost records (answered calls without a span + accepted rewards without a row)",
            "",
            float(result.lost),
            note=f"{result.calls} calls / {result.spans_stored} spans, {result.rewards} rewards / "
            f"{result.rewards_stored} rows",
        )
    )
    ctx.rows.append(Row(section, "p99 chat latency", "ms", result.p99_ms))
    rss = result.rss
    ctx.rows.append(
        Row(
            section,
            "gateway RSS growth, last tenth vs second tenth",
            "MiB",
            result.rss_growth_mib,
            note=f"RSS {min(rss):.0f}..{max(rss):.0f} MiB over {len(rss)} samples" if rss else "",
        )
    )
    if result.errors:
        ctx.notes.append(f"load test: first errors: {'; '.join(result.errors[:3])}")


def postgres(ctx: Context) -> None:
    """The PostgreSQL store against the SQLite one (bench/pg_store.py), load tests of at most a minute."""
    from bench import pg_store

    s = ctx.sizes
    sizes = pg_store.Sizes(s.store_n, s.wake_samples, s.load_agents, min(s.load_seconds, 60.0))
    ctx.rows.extend(pg_store.run(sizes))
    ctx.notes.append(
        "postgres: a throwaway local PostgreSQL cluster (fsync off: it is thrown away), the same machine; "
        "the reference column is our own SQLite store, measured in the same run."
    )
