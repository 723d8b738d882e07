"""`tether transitions export`: turn recorded rollouts into training transitions (JSONL or a HF dataset)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tether.adapters import build_transitions, to_hf_dataset, write_jsonl
from tether.adapters.build import ALL_ROWS, TransitionReport
from tether.cli.options import add_settings
from tether.cli.store_cmd import open_from_args
from tether.config.commands import TransitionsExportSettings
from tether.store import Store, StoreError
from tether.store.records import FINISHED_STATUSES, Rollout

PROG = "tether transitions"
FINISHED = sorted(status.value for status in FINISHED_STATUSES)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "transitions",
        help="export recorded model calls as training transitions",
        description="Turn the model calls recorded in the project's store into training transitions.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    export = actions.add_parser(
        "export",
        help="write transitions to a JSONL file or a Hugging Face dataset",
        description=(
            "Build one transition per recorded model call (or one per merged multi-turn sequence with "
            "--merge) from the exact token ids and logprobs the gateway recorded, with each rollout's "
            "final reward, and write them out. Calls without token ids (hosted APIs) are skipped, never "
            "re-tokenized. Prints what was built, merged and skipped, by reason."
        ),
    )
    add_settings(export, TransitionsExportSettings())
    export.add_argument("--db", help=argparse.SUPPRESS)  # older spelling of --store PATH
    export.set_defaults(command_main=export_transitions, url=None, token=None)


def select_rollouts(
    store: Store, statuses: list[str] | None, mode: str | None, run: str | None = None
) -> list[Rollout]:
    wanted = set(statuses) if statuses else set(FINISHED)
    return [
        rollout
        for rollout in store.list_rollouts(run=run, limit=ALL_ROWS)
        if rollout.status.value in wanted and (mode is None or rollout.mode == mode)
    ]


def export_transitions(args: argparse.Namespace) -> int:
    store = open_from_args(args, "transitions")
    try:
        rollouts = select_rollouts(store, args.statuses, args.mode, args.run)
        report = build_transitions(
            store,
            rollouts,
            merge=args.merge,
            agents=args.agents,
            reward_name=args.reward_name,
            attempts=args.attempts,
            choice=args.choice,
        )
    except StoreError as exc:
        raise SystemExit(f"{PROG}: {exc}") from None
    finally:
        store.close()
    try:
        write(report, args.out, args.format)
    except OSError as exc:
        raise SystemExit(f"{PROG}: cannot write {args.out}: {exc}") from None
    print(f"wrote {len(report.transitions)} transitions to {args.out} ({args.format})")
    print(report.summary())
    if not report.transitions:
        print(f"{PROG}: no transitions were built; see the skipped reasons above", file=sys.stderr)
    return 0


def write(report: TransitionReport, out: Path, fmt: str) -> None:
    if fmt == "hf":
        try:
            dataset = to_hf_dataset(report.transitions)
        except ImportError as exc:
            raise SystemExit(f"{PROG}: {exc}") from None
        dataset.save_to_disk(str(out))
        return
    write_jsonl(report.transitions, out)
