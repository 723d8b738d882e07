"""`tether store ...`: look at rollouts, attempts, spans and rewards."""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from tether.project import Project
from tether.store import NotFound, RolloutStatus, SQLiteStore, Store, StoreError
from tether.store.models import Span

console = Console()
PREVIEW_IDS = 12


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "store",
        help="list and inspect rollouts, spans and rewards",
        description="Read the project's store: the local .tether/store.db, or a running server with --url.",
    )
    parser.add_argument(
        "--project-dir", default=None, help="project directory holding .tether/ (default: cwd)"
    )
    parser.add_argument("--db", default=None, help="path of a store database (default: .tether/store.db)")
    parser.add_argument(
        "--url", default=None, help="base URL of a running `tether serve` (uses its store API)"
    )
    parser.add_argument("--token", default=None, help="admin token for --url (default: .tether/admin_token)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    rollouts = actions.add_parser("rollouts", help="list rollouts")
    rollouts.add_argument("--status", choices=[s.value for s in RolloutStatus])
    rollouts.add_argument("--limit", type=int, default=50)
    rollouts.add_argument("--json", action="store_true", help="print JSON lines instead of a table")
    rollouts.set_defaults(run=list_rollouts)

    show = actions.add_parser("show", help="show one rollout: attempts, rewards and model calls")
    show.add_argument("rollout_id", nargs="?", default="latest", help="a rollout id, or 'latest'")
    show.set_defaults(run=show_rollout)

    spans = actions.add_parser("spans", help="print a rollout's spans as JSON lines (token ids included)")
    spans.add_argument("rollout_id", nargs="?", default="latest", help="a rollout id, or 'latest'")
    spans.set_defaults(run=dump_spans)
    parser.set_defaults(run=lambda _: parser.print_help() or 2)


def open_from_args(args: argparse.Namespace) -> Store:
    project = Project.at(args.project_dir)
    if args.url:
        from tether.store.client import StoreClient

        token = args.token
        if token is None:
            if not project.admin_token_path.exists():
                raise SystemExit(
                    f"tether store: no --token given and {project.admin_token_path} does not exist"
                )
            token = project.admin_token_path.read_text().strip()
        return StoreClient(args.url.rstrip("/"), token)
    path = args.db or project.store_path
    if args.db is None and not project.store_path.exists():
        raise SystemExit(
            f"tether store: no store at {project.store_path} (run `tether serve` first, or pass --db)"
        )
    return SQLiteStore(path)


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
    rollouts = store.list_rollouts(status=args.status, limit=args.limit)
    if args.json:
        for rollout in rollouts:
            sys.stdout.write(rollout.model_dump_json() + "\n")
        return 0
    table = Table(
        "rollout", "status", "mode", "attempts", "created", "input", title=f"{len(rollouts)} rollouts"
    )
    for r in rollouts:
        table.add_row(
            r.id,
            r.status.value,
            r.mode,
            f"{r.attempt_count}/{r.max_attempts}",
            _time(r.created_at),
            orjson.dumps(r.input).decode()[:60],
        )
    console.print(table)
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


def show_rollout(args: argparse.Namespace) -> int:
    store = open_from_args(args)
    try:
        rollout = store.get_rollout(_resolve(store, args.rollout_id))
    except NotFound as exc:
        raise SystemExit(f"tether store: {exc}") from None
    console.print(
        f"[bold]{rollout.id}[/]  {rollout.status.value}  task {rollout.task_id}  mode {rollout.mode}"
    )
    console.print(f"input: {orjson.dumps(rollout.input).decode()}")
    if rollout.output is not None or rollout.error:
        console.print(f"output: {rollout.output!r}  error: {rollout.error!r}")
    for attempt in store.list_attempts(rollout.id):
        console.print(
            f"attempt {attempt.number}: {attempt.status.value} on {attempt.worker_id}, "
            f"started {_time(attempt.started_at)}" + (f", error {attempt.error}" if attempt.error else "")
        )
    for reward in store.query_rewards(rollout.id):
        console.print(f"reward {reward.name} = {reward.value} (from {reward.source})")
    spans = store.query_spans(rollout_id=rollout.id, limit=100000)
    console.print(f"{len(spans)} spans")
    for position, span in enumerate(spans):
        if not span.name.startswith("llm."):
            console.print(f"  span {span.name} ({span.status})")
            continue
        table = Table(show_header=False, title=f"model call {position + 1}", title_justify="left")
        for key, value in _call_rows(span):
            table.add_row(key, value)
        console.print(table)
    return 0


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
