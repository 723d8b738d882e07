"""A setting's declaration: its default, help, and how the command line spells it, written once on the field.

    @dataclass
    class StoreSettings:
        store: str | None = option(None, "the store: a SQLite file path or ...", metavar="URL")

The command line (`tether.cli.options`), the config file (`tether.config.files`) and the reference docs
all read these declarations; nothing else lists a setting.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

# how a flag stores its value: a value (store), a switch (true/false), each occurrence (append), a list
# of values after one flag (extend), or an optional value (optional: the flag alone stores `const`)
FlagAction = Literal["store", "store_true", "store_false", "append", "extend", "optional"]
SCALARS: tuple[type, ...] = (str, int, float, bool, Path)


@dataclass(frozen=True)
class Flag:
    help: str
    flags: tuple[str, ...] = ()  # the spellings; default: --the-field-name
    dest: str | None = None  # the command line's attribute; default: the field's name
    metavar: str | None = None
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None
    action: FlagAction | None = None  # default: from the field's type
    const: Any = None  # action "optional": the value of the flag given alone
    parse: Callable[[str], Any] | None = None  # the command line's parser of a value (default: the type)
    required: bool = False  # on the command line or in the config file
    env: str | None = None  # an environment variable whose value, where set, is the default

    def accepted(self) -> list[str] | None:
        if self.choices is None:
            return None
        return list(self.choices() if callable(self.choices) else self.choices)


@dataclass(frozen=True)
class Identity:
    """How a setting takes part in a run's identity (`run_identity`): a `shape` setting names the run
    and must be the same when it resumes (it decides the rollouts); a `name` setting only names it."""

    role: Literal["shape", "name"]
    key: str | None = None  # its key in the run's record; default: the setting's dest
    unset_left_out: bool = False  # left out while unset (None or empty), so older runs keep their names
    value: Callable[[Any, Any], Any] | None = None  # (value, the whole tree) -> what the record keeps


# A setting's part in the identity of each command's runs: one for every command, or one per command
# (a command missing from the mapping: no part).
RunPart = Literal["shape", "name"] | Identity | Mapping[str, Identity]


def option(
    default: Any,
    help: str,  # noqa: A002 - the word argparse users know
    *,
    flags: Sequence[str] = (),
    dest: str | None = None,
    metavar: str | None = None,
    choices: Sequence[str] | Callable[[], Sequence[str]] | None = None,
    action: FlagAction | None = None,
    const: Any = None,
    parse: Callable[[str], Any] | None = None,
    required: bool = False,
    env: str | None = None,
    run: RunPart | None = None,
) -> Any:
    """A settings field with its default and its command-line flag (lists default to empty: one per
    instance), and its part in naming a run (`run`)."""
    flag = Flag(help, tuple(flags), dest, metavar, choices, action, const, parse, required, env)
    metadata = {"flag": flag, "run": Identity(run) if isinstance(run, str) else run}
    if isinstance(default, list):
        items = list(default)
        return dataclasses.field(default_factory=lambda: list(items), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Setting:
    """One declared field of a settings section, its type resolved."""

    section: str  # the section's name in its tree ("" for a section alone)
    name: str
    kind: type  # the value's type: one of SCALARS, or list for a list of strings
    item: type | None  # a list's item type
    optional: bool  # None is allowed (unset)
    flag: Flag
    run: Identity | Mapping[str, Identity] | None = None

    def identity(self, command: str) -> Identity | None:
        """Its part in the identity of `command`'s runs."""
        return self.run.get(command) if isinstance(self.run, Mapping) else self.run

    @property
    def key(self) -> str:
        return f"{self.section}.{self.name}" if self.section else self.name

    @property
    def dest(self) -> str:
        return self.flag.dest or self.name

    @property
    def spellings(self) -> tuple[str, ...]:
        return self.flag.flags or ("--" + self.name.replace("_", "-"),)

    @property
    def flag_action(self) -> FlagAction:
        if self.flag.action:
            return self.flag.action
        if self.kind is bool:
            return "store_true"
        return "append" if self.kind is list else "store"


def settings_of(section_type: type, section: str = "") -> list[Setting]:
    """The declared fields of a settings dataclass, in their order."""
    hints = typing.get_type_hints(section_type)
    found = []
    for field in dataclasses.fields(section_type):
        flag = field.metadata.get("flag")
        if not isinstance(flag, Flag):
            continue
        kind, item, optional = _resolved(hints[field.name], f"{section_type.__name__}.{field.name}")
        found.append(Setting(section, field.name, kind, item, optional, flag, field.metadata.get("run")))
    return found


def sections_of(tree_type: type) -> Iterator[tuple[str, type]]:
    """A settings tree's sections: (name, dataclass) for each field that is itself a settings class."""
    hints = typing.get_type_hints(tree_type)
    for field in dataclasses.fields(tree_type):
        kind = hints[field.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            yield field.name, kind


def tree_settings(tree_type: type) -> list[Setting]:
    """Every setting of a tree, section by section."""
    return [setting for name, section in sections_of(tree_type) for setting in settings_of(section, name)]


def values_by_dest(tree: Any) -> dict[str, Any]:
    """A tree's values, keyed as the command line keeps them (each setting's `dest`)."""
    return {s.dest: getattr(getattr(tree, s.section), s.name) for s in tree_settings(type(tree))}


def run_identity(tree: Any, command: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """What names a run of `command` configured by `tree` (its default name hashes it), and the part
    of that which must not change when the run resumes: read from each setting's `run` declaration."""
    named: dict[str, Any] = {}
    shape: dict[str, Any] = {}
    for setting in tree_settings(type(tree)):
        identity = setting.identity(command)
        if identity is None:
            continue
        value = getattr(getattr(tree, setting.section), setting.name)
        if identity.unset_left_out and value in (None, [], ""):
            continue
        key = identity.key or setting.dest
        named[key] = identity.value(value, tree) if identity.value else value
        if identity.role == "shape":
            shape[key] = named[key]
    return named, shape


def _resolved(annotation: Any, where: str) -> tuple[type, type | None, bool]:
    args = typing.get_args(annotation)
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in args if arg is not type(None)]
        optional = len(rest) < len(args)
        if len(rest) != 1:
            raise TypeError(f"{where}: a setting has one type (and may be None), not {annotation}")
        annotation = rest[0]
        args = typing.get_args(annotation)
    if typing.get_origin(annotation) is list and args and args[0] in SCALARS:
        return list, args[0], optional
    if annotation in SCALARS:
        return annotation, None, optional
    raise TypeError(f"{where}: a setting is a str, int, float, bool, Path or a list of one, not {annotation}")
