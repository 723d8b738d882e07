"""Rows of the benchmark table, the machine description, and the markdown written to docs/benchmarks.md."""

from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

Value = float | str  # a measurement, or why there is none ("could not run: ...")


@dataclass
class Row:
    """One measured quantity: ours, each reference's, and the floor's, with the direction that is better."""

    section: str
    metric: str
    unit: str
    ours: Value
    theirs: dict[str, Value] = field(default_factory=dict)
    floor: Value | None = None
    higher_is_better: bool = False
    note: str = ""


def not_run(exc: BaseException | str) -> str:
    text = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
    text = " ".join(str(text).split())
    return f"could not run: {text[:160]}"


def _fmt(value: Value | None, unit: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if not unit and float(value).is_integer():
        return f"{int(value):,}"
    digits = 0 if abs(value) >= 100 else 2 if abs(value) < 10 else 1
    return f"{value:,.{digits}f} {unit}".strip()


def _ratio(ours: Value, other: Value | None, higher_is_better: bool) -> str:
    if not isinstance(ours, float | int) or not isinstance(other, float | int):
        return "-"
    if ours <= 0 or other <= 0:
        return "n/a (a figure <= 0: within noise)"
    ratio = ours / other
    better = ratio if higher_is_better else 1 / ratio
    word = "better" if better >= 1 else "worse"
    factor = better if better >= 1 else 1 / better
    return f"{ratio:.2f}x ({factor:.2f}x {word})"


def render_rows(rows: list[Row]) -> str:
    lines = [
        "| benchmark | metric | ours (Tether) | theirs (Agent Lightning / TRL) | floor | ours vs theirs "
        "| ours vs floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        arrow = "higher is better" if row.higher_is_better else "lower is better"
        theirs = "<br>".join(f"{name}: {_fmt(v, row.unit)}" for name, v in row.theirs.items()) or "-"
        ratios = (
            "<br>".join(
                f"{name}: {_ratio(row.ours, v, row.higher_is_better)}" for name, v in row.theirs.items()
            )
            or "-"
        )
        metric = f"{row.metric} ({arrow})" + (f"; {row.note}" if row.note else "")
        vs_floor = _ratio(row.ours, row.floor, row.higher_is_better)
        lines.append(
            f"| {row.section} | {metric} | {_fmt(row.ours, row.unit)} | {theirs} "
            f"| {_fmt(row.floor, row.unit)} | {ratios} | {vs_floor} |"
        )
    return "\n".join(lines)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    except OSError:
        pass
    return float("nan")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def venv_version(python: Path, package: str) -> str:
    if not python.exists():
        return "not installed"
    code = f"from importlib import metadata; print(metadata.version({package!r}))"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    return done.stdout.strip() if done.returncode == 0 else "not installed"


PREAMBLE = """# Benchmarks: Tether vs Agent Lightning (and TRL)

Each section says the command that measures its figures. The sections between `bench:NAME` markers are
written by `python -m bench` (see bench/README.md): each run replaces the sections of the benchmarks it
ran, in place, and keeps every other section. Every figure of such a section was measured in the same run,
one target after the other, on the machine it names; compare ratios, not absolute numbers. The other
sections are written by hand from the runs they describe.
"""


def measured_on(mode: str, references: dict[str, str], seconds: float | None = None) -> str:
    """The lines that say when, where and with what a section's figures were measured."""
    ours = ", ".join(
        f"{p} {_version(p)}" for p in ("tether", "torch", "transformers", "peft", "fastapi", "uvicorn")
    )
    theirs = ", ".join(f"{name} {version}" for name, version in references.items()) or "none"
    took = f"; took {seconds:.0f} s" if seconds is not None else ""
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            f"- date: {date}; mode: {mode}{took}",
            f"- machine: {cpu_model()}, {os.cpu_count()} cores, {ram_gib():.0f} GiB RAM, "
            f"{platform.system()} {platform.release()}",
            f"- Python {sys.version.split()[0]}; ours: {ours}",
            f"- references: {theirs}",
        ]
    )


def suite_section(name: str, title: str, measured: str, rows: list[Row], notes: list[str]) -> str:
    """One benchmark's section of docs/benchmarks.md: its title, command, provenance, table and notes."""
    parts = [f"## {title}", "", f"`python -m bench --only {name}`", "", measured, "", render_rows(rows)]
    if notes:
        parts += ["", *(f"- {note}" for note in notes)]
    return "\n".join(parts) + "\n"


def _begin(name: str) -> str:
    return f"<!-- bench:{name} begin (written by python -m bench; edits inside are replaced) -->"


def _end(name: str) -> str:
    return f"<!-- bench:{name} end -->"


_MARKER = re.compile(r"^<!-- bench:(?P<name>[\w.-]+) (?P<edge>begin|end)\b.*-->$", re.MULTILINE)


def marked_sections(text: str) -> dict[str, tuple[int, int]]:
    """Each `bench:NAME` section of `text`: NAME -> (start of its begin marker, end of its end marker)."""
    found: dict[str, tuple[int, int]] = {}
    opened: dict[str, int] = {}
    for match in _MARKER.finditer(text):
        name = match["name"]
        if match["edge"] == "begin":
            if name in opened or name in found:
                raise ValueError(f"section bench:{name} begins twice")
            opened[name] = match.start()
        else:
            if name not in opened:
                raise ValueError(f"section bench:{name} ends before it begins")
            found[name] = (opened.pop(name), match.end())
    if opened:
        raise ValueError(f"section bench:{next(iter(opened))} never ends")
    return found


def write_sections(path: Path, sections: dict[str, str], preamble: str = PREAMBLE) -> str:
    """Writes each of `sections` (NAME -> markdown) into `path` between its markers: a section already
    there is replaced in place; a new one goes after the last marked section (or at the end). Everything
    else in the file, marked sections this run did not regenerate and hand-written text, is kept as it
    is. A missing file starts from `preamble`."""
    text = path.read_text() if path.exists() else preamble
    for name, body in sections.items():
        block = f"{_begin(name)}\n{body.rstrip()}\n{_end(name)}"
        where = marked_sections(text)
        if name in where:
            start, end = where[name]
            text = text[:start] + block + text[end:]
        elif where:
            end = max(stop for _, stop in where.values())
            text = text[:end] + "\n\n" + block + text[end:]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text
