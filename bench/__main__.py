"""The benchmark suite: Tether against Agent Lightning (0.3.0, and its 1.x gateway when it runs) and TRL.

    .venv/bin/python -m bench            # full run (on a quiet machine)
    .venv/bin/python -m bench --quick    # small N, 30 s load test: a smoke run
    .venv/bin/python -m bench --only gateway,store

Reference environments are created under bench/ on first use (see bench/refenv.py). Whatever cannot be
installed or run becomes a row that says why. The table is printed, and each benchmark that ran replaces
its own section of docs/benchmarks.md (between its `bench:NAME` markers); the other sections are kept.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench import refenv
from bench.report import Row, measured_on, not_run, render_rows, suite_section, venv_version, write_sections

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ("gateway", "store", "async", "trainer", "load", "postgres")
TITLES = {
    "gateway": "Gateway against Agent Lightning's proxies (fake upstream)",
    "store": "Store against Agent Lightning's in-memory store",
    "async": "Async against sync training",
    "trainer": "Trainer update against TRL",
    "load": "Load test: 256 agents through one gateway",
    "postgres": "PostgreSQL store against SQLite (suite run)",
}
# The reference versions (Context.versions keys) each benchmark's section names.
REFERENCES = {
    "gateway": ("agentlightning", "litellm", "opentelemetry-sdk", "agentlightning 1.x (gateway, unpacked)"),
    "store": ("agentlightning", "opentelemetry-sdk"),
    "trainer": ("trl", "torch (TRL venv)"),
}


@dataclass
class Sizes:
    recorded_calls: int  # calls recorded per proxy before measuring memory per call
    latency_calls: int  # 1-client calls for p50/p99
    throughput_calls: int  # calls per throughput measurement (16 and 64 clients)
    store_n: int  # records per store operation
    wake_samples: int
    async_steps: int
    trainer_steps: int
    load_agents: int
    load_seconds: float

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        if quick:
            return cls(1000, 150, 400, 200, 10, 2, 2, 256, 30)
        return cls(10_000, 1000, 3000, 2000, 30, 4, 5, 256, 180)


@dataclass
class Context:
    sizes: Sizes
    folder: Path
    log: Path
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)
    _agl: Path | str | None = None
    _agl1: Path | str | None = None

    def agl(self) -> Path:
        """Python of the Agent Lightning 0.3.0 venv; raises refenv.Unavailable (once, then cached)."""
        if self._agl is None:
            try:
                self._agl = refenv.ensure_agl(self.log)
                self.versions["agentlightning"] = venv_version(self._agl, "agentlightning")
                self.versions["litellm"] = venv_version(self._agl, "litellm")
                self.versions["opentelemetry-sdk"] = venv_version(self._agl, "opentelemetry-sdk")
            except Exception as exc:  # noqa: BLE001 - reported in the table
                self._agl = not_run(exc)
        if isinstance(self._agl, str):
            raise refenv.Unavailable(self._agl.removeprefix("could not run: "))
        return self._agl

    def agl1(self) -> Path:
        if self._agl1 is None:
            try:
                self._agl1 = refenv.ensure_agl1(self.log)
                self.versions["agentlightning 1.x (gateway, unpacked)"] = refenv.agl1_version(self._agl1)
            except Exception as exc:  # noqa: BLE001 - reported in the table
                self._agl1 = not_run(exc)
        if isinstance(self._agl1, str):
            raise refenv.Unavailable(self._agl1.removeprefix("could not run: "))
        return self._agl1


def progress(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def _runners() -> dict[str, Callable[[Context], None]]:
    from bench import suite

    return {
        "gateway": suite.gateway,
        "store": suite.store,
        "async": suite.async_vs_sync,
        "trainer": suite.trainer,
        "load": suite.load,
        "postgres": suite.postgres,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small N and a 30 s load test (a smoke run)")
    parser.add_argument(
        "--only", default=",".join(BENCHMARKS), help=f"comma-separated: {','.join(BENCHMARKS)}"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    folder = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    ctx = Context(Sizes.of(args.quick), folder, folder / "install.log")
    runners = _runners()
    began = time.perf_counter()
    ran: list[tuple[str, list[Row], list[str], float]] = []
    for index, name in enumerate(chosen, 1):
        progress(f"({index}/{len(chosen)}) {name} ...")
        started = time.perf_counter()
        rows_before, notes_before = len(ctx.rows), len(ctx.notes)
        try:
            runners[name](ctx)
        except Exception as exc:  # noqa: BLE001 - one broken benchmark must not sink the others
            traceback.print_exc(file=sys.stderr)
            ctx.rows.append(Row(name, "whole benchmark", "", not_run(exc)))
        took = time.perf_counter() - started
        ran.append((name, ctx.rows[rows_before:], ctx.notes[notes_before:], took))
        progress(f"({index}/{len(chosen)}) {name} done in {took:.0f} s")
    progress(f"total wall-clock {time.perf_counter() - began:.0f} s")
    if ctx.log.exists():
        progress(f"reference install log: {ctx.log}")
    mode = "quick" if args.quick else "full"
    sections = {}
    for name, rows, notes, took in ran:
        versions = {k: v for k, v in ctx.versions.items() if k in REFERENCES.get(name, ())}
        sections[name] = suite_section(name, TITLES[name], measured_on(mode, versions, took), rows, notes)
    write_sections(args.out, sections)
    print(render_rows(ctx.rows))
    progress(f"wrote the sections {', '.join(sections)} of {args.out}; kept the others")
    return 0


if __name__ == "__main__":
    sys.exit(main())
