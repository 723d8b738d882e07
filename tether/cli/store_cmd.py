"""`tether store ...`: look at rollouts, attempts, spans and rewards."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from collections import Counter
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tether.adapters.build import ALL_ROWS
from tether.cli.options import add_settings
from tether.cli.secrets import STORE_TOKEN, add_secret_arg, secret_value
from tether.config.inspect import (
    ListRolloutsSettings,
    RewardAgreementSettings,
    StoreMigrationSettings,
    StoreReadSettings,
)
from tether.contracts import AGENT_OUTPUT_SPAN, Origin, is_call_span
from tether.project import Project
from tether.store import NotFound, RolloutStatus, Store, StoreError, StoreOptions, open_store, rollout_reward
from tether.store.backends import default_store_url, scheme_of, sqlite_path
from tether.store.records import Rollout, Span
from tether.text import shown

console = Console()
PREVIEW_IDS = 12


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "store",
        help="list and inspect rollouts, spans and rewards",
        description="Read the project's store (--store: a SQLite file, or a running `tether serve`).",
    )
    add_settings(parser, StoreReadSettings(), config_file=False)
    parser.add_argument("--db", help=argparse.SUPPRESS)  # older spelling of --store PATH
    parser.add_argument("--url", help=argparse.SUPPRESS)  # older spelling of --store URL
    add_secret_arg(parser, STORE_TOKEN, otherwise=", else .tether/admin_token")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    rollouts = actions.add_parser("rollouts", help="list rollouts")
    add_settings(rollouts, ListRolloutsSettings(), config_file=False)
    rollouts.set_defaults(command_main=list_rollouts)

    runs = actions.add_parser("runs", help="list the runs that have rollouts")
    runs.set_defaults(command_main=list_runs)

    show = actions.add_parser("show", help="show one rollout: attempts, rewards and model calls")
    show.add_argument("rollout_id", nargs="?", default="latest", help="a rollout id, or 'latest'")
    show.set_defaults(command_main=show_rollout)

    spans = actions.add_parser("spans", help="print a rollout's spans as JSON lines (token ids included)")
    spans.add_argument("rollout_id", nargs="?", default="latest", help="a rollout id, or 'latest'")
    spans.set_defaults(command_main=dump_spans)

    agree = actions.add_parser(
        "agreement",
        help="how far two named rewards of a run's rollouts agree (a judge against an evaluator)",
        description="Compare two rewards that the same rollouts carry, such as a judge's and the "
        "evaluator's (train with --reward judge:RUBRIC.md --reward evaluator.py:fn --reward-weights judge=1 "
        "to record both): each read as pass/fail at --threshold, their agreement rate with its 95%% "
        "bootstrap interval, Cohen's kappa, and Pearson's r of the raw values.",
    )
    add_settings(agree, RewardAgreementSettings(), config_file=False)
    agree.set_defaults(command_main=reward_agreement)

    migrate = actions.add_parser(
        "migrate",
        help="copy every record of one store into another (e.g. SQLite into PostgreSQL)",
        description="Copy tasks, rollouts, attempts, spans, rewards and resources, as they are, then check "
        "every table's count. The target must be empty unless --force.",
    )
    add_settings(migrate, StoreMigrationSettings(), config_file=False)
    migrate.set_defaults(command_main=migrate_stores)
    parser.set_defaults(command_main=lambda _: parser.print_help() or 2)


def open_from_args(args: argparse.Namespace, command: str = "store") -> Store:
    """The store to read: it must exist already (reading never creates an empty one)."""
    project = Project.at(args.project_dir)
    url = args.store or args.db or args.url or default_store_url(project.root)
    if scheme_of(url) == "sqlite":
        path = sqlite_path(url, project.root)
        if not path.is_file():
            raise SystemExit(
                f"tether: no store database at {path} (run `tether serve` first, or check --store)"
            )
    try:
        return open_store(url, StoreOptions(project_dir=project.root, token=secret_value(args, STORE_TOKEN)))
    except StoreError as exc:
        raise SystemExit(f"tether {command}: {exc}") from None


def _time(value: float | None) -> str:
    return dt.datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


def _resolve(store: Store, rollout_id: str) -> str:
    if rollout_id != "latest":
        return rollout_id
    rollouts = store.list_rollouts(since=0, limit=100000)
    if not rollouts:
        raise SystemExit("tether store: the store has no rollouts yet")
    return rollouts[-1].id


def list_rollouts(args: argparse.Namespace) -> int:
    store = open_from_args(args)
    limit = args.limit if args.limit > 0 else ALL_ROWS
    rollouts = store.list_rollouts(status=args.status, run=args.run, limit=limit)
    if args.json:
        for rollout in rollouts:
            sys.stdout.write(orjson.dumps(_summary(store, rollout)).decode() + "\n")
        return 0
    columns = ("rollout", "run", "status", "mode", "attempts", "reward", "created", "input")
    table = Table(*columns, title=f"{len(rollouts)} rollouts")
    for r in rollouts:
        reward = rollout_reward(store, r) if r.status.finished else None
        cells = (
            r.id,
            r.run or "-",
            r.status.value,
            r.mode,
            f"{r.attempt_count}/{r.max_attempts}",
            "-" if reward is None else f"{reward:g}",
            _time(r.created_at),
            orjson.dumps(r.input).decode()[:60],
        )
        table.add_row(*(shown(cell) for cell in cells))
    console.print(table)
    return 0


def _summary(store: Store, rollout: Rollout) -> dict[str, Any]:
    return {
        "id": rollout.id,
        "run": rollout.run,
        "task_id": rollout.task_id,
        "sample": rollout.sample,
        "status": rollout.status.value,
        "attempts": rollout.attempt_count,
        "reward": rollout_reward(store, rollout),
        "mode": rollout.mode,
        "error": rollout.error,
    }


def list_runs(args: argparse.Namespace) -> int:
    store = open_from_args(args)
    for run in store.list_runs():
        rollouts = store.list_rollouts(run=run, limit=ALL_ROWS)
        counts = Counter(r.status.value for r in rollouts)
        detail = ", ".join(f"{status} {count}" for status, count in sorted(counts.items()))
        console.print(shown(f"{run}  {len(rollouts)} rollouts ({detail})"))
    return 0


def _ids_preview(ids: list[int] | None) -> str:
    if ids is None:
        return "absent"
    head = ", ".join(str(i) for i in ids[:PREVIEW_IDS])
    return f"[{head}{', ...' if len(ids) > PREVIEW_IDS else ''}] ({len(ids)})"


def _call_rows(span: Span) -> list[tuple[str, str]]:
    attrs: dict[str, Any] = span.attributes
    rows = [
        ("call", f"{span.name} via {attrs.get('upstream')} (model {attrs.get('model')!r}, {span.status})"),
        ("policy version", str(attrs.get("policy_version"))),
        ("latency", f"{attrs.get('latency_ms')} ms"),
        ("prompt token ids", _ids_preview(attrs.get("prompt_token_ids"))),
    ]
    for choice in attrs.get("choices") or []:
        logprobs = choice.get("logprobs")
        mean = f"{sum(logprobs) / len(logprobs):.3f}" if logprobs else "absent"
        rows += [
            (f"response {choice['index']} token ids", _ids_preview(choice.get("token_ids"))),
            (f"response {choice['index']} logprobs", f"{len(logprobs or [])} values, mean {mean}"),
            (f"response {choice['index']} text", repr(choice.get("text"))[:200]),
            (f"response {choice['index']} finish", str(choice.get("finish_reason"))),
        ]
    if "error" in attrs:
        rows.append(("error", attrs["error"].get("message", "")))
    return rows


def _span_rows(span: Span) -> list[tuple[str, str]]:
    """A model call's rows; a span the agent sent may hold anything, shown as it is when it fits no row."""
    try:
        return _call_rows(span)
    except (AttributeError, KeyError, TypeError, ValueError):
        attributes = orjson.dumps(span.attributes, default=str).decode()
        return [
            ("call", f"{span.name} ({span.status}, origin {span.origin})"),
            ("attributes", attributes[:400]),
        ]


def show_rollout(args: argparse.Namespace) -> int:
    store = open_from_args(args)
    try:
        rollout = store.get_rollout(_resolve(store, args.rollout_id))
    except NotFound as exc:
        raise SystemExit(f"tether store: {exc}") from None
    # Everything below but the rollout's id may be the agent's text: shown as text, never as markup.
    heading = f"  {rollout.status.value}  task {rollout.task_id}  mode {rollout.mode}"
    console.print(Text.assemble((rollout.id, "bold"), shown(heading)))
    console.print(shown(f"input: {orjson.dumps(rollout.input).decode()}"))
    if rollout.output is not None or rollout.error:
        console.print(shown(f"output: {rollout.output!r}  error: {rollout.error!r}"))
    for attempt in store.list_attempts(rollout.id):
        console.print(
            shown(
                f"attempt {attempt.number}: {attempt.status.value} on {attempt.worker_id}, "
                f"started {_time(attempt.started_at)}" + (f", error {attempt.error}" if attempt.error else "")
            )
        )
    for reward in store.query_rewards(rollout.id):
        console.print(shown(f"reward {reward.name} = {reward.value} (from {reward.source})"))
    spans = store.query_spans(rollout_id=rollout.id, limit=100000)
    console.print(f"{len(spans)} spans")
    for position, span in enumerate(spans):
        if span.name == AGENT_OUTPUT_SPAN and span.origin == Origin.RUNNER:
            _print_agent_output(span)
            continue
        if not is_call_span(span.name):  # a refused call says why
            why = f": {span.status_message}" if span.status_message else ""
            console.print(shown(f"  span {span.name} ({span.status}){why}"))
            continue
        table = Table(show_header=False, title=f"model call {position + 1}", title_justify="left")
        for key, value in _span_rows(span):
            table.add_row(shown(key), shown(value))
        console.print(table)
    return 0


def _print_agent_output(span: Span, lines: int = 40) -> None:
    """A failed attempt's output as the runner kept it: the ends of its stderr and stdout."""
    console.print(
        shown(f"  agent output, attempt {span.attempt} (exit code {span.attributes.get('exit_code')})")
    )
    for stream in ("stderr", "stdout"):
        text = str(span.attributes.get(stream) or "").rstrip()
        if text:
            console.print(f"  {stream}:")
            console.print(shown("\n".join("    " + line for line in text.splitlines()[-lines:])))


def dump_spans(args: argparse.Namespace) -> int:
    store = open_from_args(args)
    try:
        rollout_id = _resolve(store, args.rollout_id)
        store.get_rollout(rollout_id)
    except (NotFound, StoreError) as exc:
        raise SystemExit(f"tether store: {exc}") from None
    for span in store.query_spans(rollout_id=rollout_id, limit=1_000_000):
        sys.stdout.write(span.model_dump_json() + "\n")
    return 0


def reward_agreement(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from tether.rewards.agreement import agreement
    from tether.store.reward_rule import agent_rewards_count, named_reward

    first, sep, second = (name.strip() for name in args.rewards.partition(","))
    if not sep or not first or not second or "," in second:
        raise SystemExit(
            f"tether store agreement: --rewards takes two names, FIRST,SECOND; got {args.rewards!r}"
        )
    store = open_from_args(args)
    rollouts = [
        r
        for r in store.list_rollouts(run=args.run, status=RolloutStatus.succeeded, limit=ALL_ROWS)
        if args.mode == "all" or r.mode == args.mode
    ]
    if not rollouts:
        raise SystemExit(f"tether store agreement: run {args.run!r} has no succeeded {args.mode} rollouts")
    pairs: list[tuple[float, float]] = []
    seen: set[str] = set()
    for rollout in rollouts:
        rewards = store.query_rewards(rollout.id)
        seen.update(r.name for r in rewards if r.span_id is None)
        attempt, own = rollout.attempt_count or None, agent_rewards_count(rollout)
        a = named_reward(rewards, attempt, first, agent_rewards=own)
        b = named_reward(rewards, attempt, second, agent_rewards=own)
        if a is not None and b is not None:
            pairs.append((a, b))
    if not pairs:
        raise SystemExit(
            f"tether store agreement: none of the {len(rollouts)} rollouts carries both {first!r} and "
            f"{second!r}; their rewards are named {sorted(seen)}"
        )
    result = agreement(pairs, args.threshold)
    if args.json:
        sys.stdout.write(orjson.dumps({"first": first, "second": second, **asdict(result)}).decode() + "\n")
        return 0
    kappa = "-" if result.kappa is None else f"{result.kappa:+.3f}"
    pearson = "-" if result.pearson is None else f"{result.pearson:+.3f}"
    console.print(
        shown(
            f"{result.n} of {len(rollouts)} {args.mode} rollouts carry both {first} and {second}\n"
            f"agreement {result.rate:.3f} [{result.rate_low:.3f}, {result.rate_high:.3f}]  "
            f"kappa {kappa}  pearson {pearson}\n"
            f"both pass {result.both_pass}, both fail {result.both_fail}, only {first} passes "
            f"{result.only_first}, only {second} passes {result.only_second} "
            f"(pass: at least {args.threshold:g})\n"
            f"mean {first} {result.first_mean:.3f}, mean {second} {result.second_mean:.3f}"
        )
    )
    return 0


def migrate_stores(args: argparse.Namespace) -> int:
    from tether.store.migrate import migrate_store

    project = Project.at(args.project_dir)
    source = args.source or args.store or default_store_url(project.root)
    if scheme_of(source) == "sqlite" and not sqlite_path(source, project.root).is_file():
        raise SystemExit(f"tether store migrate: no store database at {sqlite_path(source, project.root)}")

    def progress(table: str, done: int, total: int) -> None:
        end, live = ("\n" if done == total else ""), sys.stderr.isatty()
        if end or live:  # on a terminal, one line updated as rows go; else a line per table
            sys.stderr.write(f"{chr(13) if live else ''}copying {table}: {done}/{total}{end}")
            sys.stderr.flush()

    try:
        report = migrate_store(
            source, args.target, project_dir=project.root, force=args.force, progress=progress
        )
    except StoreError as exc:
        raise SystemExit(f"tether store migrate: {exc}") from None
    copied = ", ".join(f"{count} {table}" for table, count in report.copied.items())
    skipped = sum(report.skipped.values())
    console.print(f"copied {copied}" + (f" ({skipped} already there, skipped)" if skipped else ""))
    return 0
