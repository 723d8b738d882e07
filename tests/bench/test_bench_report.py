"""The benchmark suite's table and its command line, without running any benchmark."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as bench_main
from bench.report import Row, header, not_run, render_rows, write_report


def test_ratios_say_which_way_is_better() -> None:
    rows = [
        Row("gateway", "added p50 latency", "ms", 2.0, {"AGL": 8.0}, 1.0, higher_is_better=False),
        Row("gateway", "throughput", "req/s", 400.0, {"AGL": 100.0}, 800.0, higher_is_better=True),
    ]
    table = render_rows(rows).splitlines()
    assert table[0].startswith("| benchmark | metric | ours (Tether)")
    latency, throughput = table[2], table[3]
    assert "AGL: 0.25x (4.00x better)" in latency and "| 2.00x (2.00x worse) |" in latency
    assert "AGL: 4.00x (4.00x better)" in throughput and "| 0.50x (2.00x worse) |" in throughput


def test_a_reference_that_could_not_run_keeps_its_reason() -> None:
    reason = not_run(RuntimeError("pip could not\n  install it"))
    assert reason == "could not run: RuntimeError: pip could not install it"
    row = Row("trainer", "tokens/s", "tok/s", 700.0, {"TRL": reason}, None, higher_is_better=True)
    line = render_rows([row]).splitlines()[2]
    assert "TRL: could not run: RuntimeError: pip could not install it" in line
    assert "TRL: -" in line  # no ratio against a missing figure


def test_report_file_has_machine_versions_and_notes(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "benchmarks.md"
    head = header("quick", {"agentlightning": "0.3.0"})
    body = write_report(out, head, [Row("store", "spans written", "/s", 1234.5)], ["a note"])
    assert out.read_text() == body
    assert "cores" in body and "GiB RAM" in body and "Python 3." in body and "mode: quick" in body
    assert "agentlightning 0.3.0" in body and "1,234 /s" in body and "- a note" in body


def test_unknown_benchmark_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        bench_main.main(["--only", "gateway,nope"])
    assert stop.value.code == 2
    assert "unknown benchmark(s): nope" in capsys.readouterr().err


def test_a_reference_that_failed_to_install_is_not_retried(tmp_path: Path) -> None:
    from bench import refenv

    ctx = bench_main.Context(
        bench_main.Sizes.of(True), tmp_path, tmp_path / "log", _agl="could not run: no wheel"
    )
    for _ in range(2):
        with pytest.raises(refenv.Unavailable, match="no wheel"):
            ctx.agl()
    assert not (tmp_path / "log").exists()
