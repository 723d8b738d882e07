"""Settings trees to and from TOML: `[section]` tables of `key = value`, each key a declared setting.

A file is checked whole against its tree before anything runs: an unknown table or key, a value of the
wrong type or outside a setting's choices is a `ConfigFileError` naming the key, the file and its line,
and what is accepted.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tomllib
from pathlib import Path
from typing import Any

from tether.config.option import Setting, sections_of, tree_settings

_TABLE = re.compile(r"^\s*\[\s*([A-Za-z0-9_.\-]+)\s*\]")
_KEY = re.compile(r"^\s*([A-Za-z0-9_.\-\"']+)\s*=")


class ConfigFileError(ValueError):
    """A config file that does not fit its settings tree."""


def read_config(path: str | Path, tree_type: type) -> dict[str, Any]:
    """The settings a TOML file sets, by key (`section.name`), each checked against `tree_type`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigFileError(f"{path}: not valid TOML: {exc}") from None
    lines = _key_lines(text)
    known = {setting.key: setting for setting in tree_settings(tree_type)}
    sections = [name for name, _ in sections_of(tree_type)]
    found: dict[str, Any] = {}
    for section, table in document.items():
        where = f"{path}:{lines.get(section, 1)}"
        if section not in sections:
            raise ConfigFileError(f"{where}: unknown table [{section}]; the tables are {', '.join(sections)}")
        if not isinstance(table, dict):
            raise ConfigFileError(f"{where}: {section} is a table ([{section}] then key = value lines)")
        for name, value in table.items():
            key = f"{section}.{name}"
            where = f"{path}:{lines.get(key, lines.get(section, 1))}"
            setting = known.get(key)
            if setting is None:
                names = [s.name for s in known.values() if s.section == section]
                raise ConfigFileError(f"{where}: unknown key {key}; [{section}] takes {', '.join(names)}")
            found[key] = checked_value(setting, value, where)
    return found


def checked_value(setting: Setting, value: Any, where: str) -> Any:
    """`value` as `setting` holds it (a Path from a string, a float from an integer), or a
    ConfigFileError naming the key and what it accepts."""
    if setting.kind is list:
        if not isinstance(value, list):
            raise ConfigFileError(f'{where}: {setting.key} is a list, e.g. {setting.name} = ["..."]')
        assert setting.item is not None
        return [_scalar(setting, setting.item, item, where) for item in value]
    return _scalar(setting, setting.kind, value, where)


def _scalar(setting: Setting, kind: type, value: Any, where: str) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    wanted = str if kind is Path else kind
    if not isinstance(value, wanted) or (wanted is int and isinstance(value, bool)):
        raise ConfigFileError(
            f"{where}: {setting.key} = {json.dumps(value, default=str)} is not a {_type_name(kind)}"
        )
    accepted = setting.flag.accepted()
    if accepted is not None and value not in accepted:
        raise ConfigFileError(
            f"{where}: {setting.key} = {json.dumps(value)} is not accepted; one of {', '.join(accepted)}"
        )
    if setting.flag.parse is not None:  # the flag's own check (a positive count, say), as a flag gets it
        try:
            setting.flag.parse(str(value))
        except ValueError as exc:
            raise ConfigFileError(f"{where}: {setting.key} = {json.dumps(value)}: {exc}") from None
    return Path(str(value)) if kind is Path else value


def _type_name(kind: type) -> str:
    return {str: "string", int: "whole number", float: "number", bool: "true or false", Path: "path"}[kind]


def _key_lines(text: str) -> dict[str, int]:
    """The line of each table header and key, for errors (tomllib does not keep positions)."""
    lines: dict[str, int] = {}
    table = ""
    for number, line in enumerate(text.splitlines(), start=1):
        header = _TABLE.match(line)
        if header:
            table = header.group(1)
            lines.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            name = key.group(1).strip("\"'")
            lines.setdefault(f"{table}.{name}" if table else name, number)
    return lines


def dump_config(tree: Any, header: str = "") -> str:
    """A settings tree as TOML, every set value (None is unset, so left out); `read_config` reads it
    back to the same tree."""
    out = [f"# {line}" for line in header.splitlines()]
    for section, _ in sections_of(type(tree)):
        values = dataclasses.asdict(getattr(tree, section))
        rows = [f"{name} = {_toml(value)}" for name, value in values.items() if value is not None]
        if rows:
            out += ["", f"[{section}]", *rows]
    return "\n".join(out).lstrip("\n") + "\n"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else f"{value:+}"[:4])
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)


def write_config(tree: Any, path: Path, command: str) -> None:
    """A resolved tree into a run folder: `tether COMMAND --config PATH` reruns (resumes) the run."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_config(tree, f"tether {command} --config {path} reruns this run"))
