"""The benchmark suite's table and its command line, without running any benchmark."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import __main__ as bench_main
from bench.report import (
    PREAMBLE,
    Row,
    marked_sections,
    measured_on,
    not_run,
    render_rows,
    suite_section,
    write_sections,
)


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


def test_a_section_has_its_command_machine_versions_table_and_notes() -> None:
    measured = measured_on("quick", {"agentlightning": "0.3.0"}, 12.4)
    body = suite_section(
        "store", "Store", measured, [Row("store", "spans written", "/s", 1234.5)], ["a note"]
    )
    assert body.startswith("## Store\n\n`python -m bench --only store`\n")
    assert "cores" in body and "GiB RAM" in body and "Python 3." in body and "mode: quick; took 12 s" in body
    assert "agentlightning 0.3.0" in body and "1,234 /s" in body and body.endswith("- a note\n")


HAND_WRITTEN = """# Benchmarks

Intro, by hand.

<!-- bench:gateway begin (written by python -m bench; edits inside are replaced) -->
## Gateway

old gateway table
<!-- bench:gateway end -->

<!-- bench:store begin (written by python -m bench; edits inside are replaced) -->
## Store

old store table
<!-- bench:store end -->

## Fair scheduling (by hand)

| | before | after |
|---|---|---|
| ratio | 322x - 670x | 1.8x - 2.5x |
"""


def test_a_run_replaces_its_sections_in_place_and_keeps_every_other(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    out.write_text(HAND_WRITTEN)
    written = write_sections(out, {"store": "## Store\n\nnew store table\n"})
    assert out.read_text() == written
    assert written == HAND_WRITTEN.replace("old store table", "new store table")
    # Again, with a section the file does not have yet: it goes after the last marked one.
    written = write_sections(out, {"gateway": "## Gateway\n\nnew gateway\n", "load": "## Load\n\nload\n"})
    assert "old gateway table" not in written and "new gateway" in written and "new store table" in written
    assert written.index("bench:store end") < written.index("bench:load begin")
    assert written.index("bench:load end") < written.index("## Fair scheduling (by hand)")
    assert written.startswith("# Benchmarks\n\nIntro, by hand.\n")
    assert written.endswith(HAND_WRITTEN[HAND_WRITTEN.index("## Fair scheduling") :])
    assert list(marked_sections(written)) == ["gateway", "store", "load"]


def test_a_missing_report_starts_from_the_preamble(tmp_path: Path) -> None:
    out = tmp_path / "docs" / "benchmarks.md"
    written = write_sections(out, {"async": "## Async\n\nfigures\n"})
    assert written.startswith(PREAMBLE)
    assert list(marked_sections(written)) == ["async"] and "figures" in written


@pytest.mark.parametrize(
    "broken",
    [
        "<!-- bench:store begin -->\nno end\n",
        "<!-- bench:store end -->\n",
        "<!-- bench:store begin -->\n<!-- bench:store begin -->\n<!-- bench:store end -->\n",
    ],
)
def test_broken_markers_are_refused_and_the_file_is_left_alone(tmp_path: Path, broken: str) -> None:
    out = tmp_path / "benchmarks.md"
    out.write_text(broken)
    with pytest.raises(ValueError, match="bench:store"):
        write_sections(out, {"store": "new"})
    assert out.read_text() == broken


def test_the_published_report_keeps_all_but_the_rewritten_section(tmp_path: Path) -> None:
    """docs/benchmarks.md itself: rewriting one suite section leaves every other byte where it was, the
    hand-written sections that the README quotes included."""
    published = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text()
    sections = marked_sections(published)
    assert set(sections) >= {"gateway", "store", "async", "trainer", "load"}
    out = tmp_path / "benchmarks.md"
    out.write_text(published)
    written = write_sections(out, {"store": "## Store\n\nrewritten\n"})
    start, end = sections["store"]
    assert written[:start] == published[:start]
    assert written.endswith(published[end:])
    for kept in ("Fair scheduling across rollouts", "PostgreSQL store against SQLite", "Dashboard (M11)"):
        assert kept in written


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
