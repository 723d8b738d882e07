"""A command's flags, made from its settings tree (`tether.config`): one flag per declared setting, in one
argument group per section, and the tree back from the parsed command line.

Precedence, lowest first: the tree's defaults, `--config FILE`, the flags given. A config file's values
become the parser's defaults before it parses, so a flag given overrides its key; a list given on the
command line replaces the file's list.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tether.config.files import ConfigFileError, dump_config, read_config
from tether.config.option import Setting, sections_of, settings_of, tree_settings

TREE = "settings_tree"  # the parser's default naming its command's tree type
FILE_LISTS = "settings_file_lists"  # list values a config file sets, applied where no flag gave one


def add_settings(parser: argparse.ArgumentParser, tree: Any, config_file: bool = True) -> None:
    """Flags for every setting of `tree` (an instance: its values are the defaults), then (`config_file`)
    `--config` and `--print-config`."""
    for name, section_type in sections_of(type(tree)):
        section = getattr(tree, name)
        group = parser.add_argument_group(name, _description(section_type))
        for setting in settings_of(section_type, name):
            _add_flag(group, setting, getattr(section, setting.name))
    if not config_file:
        return
    files = parser.add_argument_group("config file")
    files.add_argument(
        "--config",
        metavar="FILE",
        help="read settings from this TOML file ([section] tables of key = value, as --print-config "
        "writes them); flags given override its keys. A run folder's config.toml reruns that run",
    )
    files.add_argument(
        "--print-config",
        action="store_true",
        help="print the settings this command line resolves to, as TOML, and exit",
    )
    parser.set_defaults(**{TREE: type(tree), FILE_LISTS: {}})


def _description(section_type: type) -> str | None:
    return (section_type.__doc__ or "").strip() or None


def _add_flag(group: argparse._ArgumentGroup, setting: Setting, default: Any) -> None:
    flag = setting.flag
    if flag.env and os.environ.get(flag.env):  # the environment's default, checked as a flag's value
        default = _from_environment(setting, os.environ[flag.env])
    action = setting.flag_action
    options: dict[str, Any] = {"dest": setting.dest, "help": flag.help.replace("%", "%%")}
    if action in ("store_true", "store_false"):
        options["action"] = action
    else:
        options["type"] = _parser_of(setting)
        if flag.metavar:
            options["metavar"] = flag.metavar
        if flag.accepted() is not None:
            options["choices"] = flag.accepted()
    if action in ("append", "extend"):
        options["action"] = action
        options["nargs"] = "+" if action == "extend" else None
    if action == "optional":
        options.update(nargs="?", const=flag.const)
    group.add_argument(*setting.spellings, default=default, required=flag.required, **options)


def _from_environment(setting: Setting, text: str) -> Any:
    parse = _parser_of(setting)
    try:
        value = parse(text) if parse is not None else text
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise SystemExit(f"tether: ${setting.flag.env}={text!r}: {exc}") from None
    accepted = setting.flag.accepted()
    if accepted is not None and value not in accepted:
        raise SystemExit(f"tether: ${setting.flag.env}={text!r} is not one of {', '.join(accepted)}")
    return value


def _parser_of(setting: Setting) -> Callable[[str], Any] | None:
    parse = setting.flag.parse
    kind = setting.item if setting.kind is list else setting.kind
    if parse is None:
        return None if kind is str else kind

    def parsed(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:  # argparse shows an ArgumentTypeError's message as it is
            raise argparse.ArgumentTypeError(str(exc)) from None

    parsed.__name__ = getattr(parse, "__name__", "value")
    return parsed


def config_file_in(argv: Sequence[str]) -> str | None:
    """The FILE of `--config FILE` (or `--config=FILE`) on a command line, before it is parsed."""
    for index, word in enumerate(argv):
        if word == "--":
            break
        if word == "--config" and index + 1 < len(argv):
            return argv[index + 1]
        if word.startswith("--config="):
            return word.partition("=")[2]
    return None


def load_config_file(parser: argparse.ArgumentParser, path: str, prog: str) -> None:
    """A config file's values as `parser`'s defaults (its required flags then optional where the file
    gives them); a bad file exits with one line naming the key, the file and its line."""
    tree_type = parser.get_default(TREE)
    if tree_type is None:
        raise SystemExit(f"{prog}: --config: this command takes no config file")
    try:
        values = read_config(path, tree_type)
    except ConfigFileError as exc:
        raise SystemExit(f"{prog}: {exc}") from None
    by_key = {setting.key: setting for setting in tree_settings(tree_type)}
    defaults: dict[str, Any] = {}
    lists: dict[str, Any] = {}
    for key, value in values.items():
        setting = by_key[key]
        if setting.kind is list:  # None until a flag appends: `resolve_lists` then knows none did
            defaults[setting.dest], lists[setting.dest] = None, value
        else:
            defaults[setting.dest] = value
    for action in parser._actions:
        if action.dest in defaults or action.dest in lists:
            action.required = False
    parser.set_defaults(**defaults, **{FILE_LISTS: lists})


def resolve_lists(args: argparse.Namespace) -> None:
    """A config file's lists where no flag gave one (a given flag's list replaces the file's)."""
    for dest, value in (getattr(args, FILE_LISTS, None) or {}).items():
        if getattr(args, dest, None) is None:
            setattr(args, dest, list(value))


def settings_from_args(args: argparse.Namespace) -> Any:
    """The command's settings tree, from a parsed command line."""
    tree_type = getattr(args, TREE)
    sections = {}
    for name, section_type in sections_of(tree_type):
        values = {s.name: getattr(args, s.dest) for s in settings_of(section_type, name)}
        sections[name] = section_type(**values)
    return tree_type(**sections)


def print_config(args: argparse.Namespace) -> None:
    sys.stdout.write(dump_config(settings_from_args(args), f"tether {args.command} settings"))


def changed_keys(before: Any, after: Any) -> list[str]:
    """The keys (`section.name`) whose values differ between two trees of one type."""
    return [
        f"{name}.{field}"
        for name, _ in sections_of(type(before))
        for field, value in dataclasses.asdict(getattr(before, name)).items()
        if dataclasses.asdict(getattr(after, name))[field] != value
    ]
