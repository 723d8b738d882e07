"""Options and wiring shared by the commands that serve the policy (serve, rollout, train)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tether.contracts import POLICY_UPSTREAM
from tether.gateway import EngineUpstream, HTTPUpstream, HTTPUpstreamConfig

if TYPE_CHECKING:
    from tether.engines.transformers_engine import TransformersEngine
from tether.project import Project
from tether.runner.runs import RunError, RunRecord, default_run_name, start_run
from tether.store import Store, StoreError, StoreOptions, StoreURLError, Task, open_store
from tether.store.backends import STORE_ENV


def add_policy_args(parser: argparse.ArgumentParser, default_model: str = "smollm2-135m") -> None:
    parser.add_argument(
        "--model",
        default=default_model,
        help="policy model for the built-in engine: smollm2-135m, tiny-random, or a local HF folder",
    )
    parser.add_argument(
        "--upstream",
        metavar="URL",
        help="forward calls to this OpenAI-compatible base URL instead of the built-in engine",
    )
    parser.add_argument("--upstream-key", metavar="KEY", help="API key for --upstream")
    parser.add_argument("--upstream-model", metavar="NAME", help="model name to send to --upstream")
    parser.add_argument(
        "--upstream-token-ids",
        action="store_true",
        help="ask --upstream for token ids (vLLM's return_token_ids)",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=8,
        help="built-in engine: requests per batch (a rollout with nothing running may still join a full "
        "batch, so that no rollout waits behind another's long generations)",
    )


def load_engine(model: str, max_batch_size: int, console: Console) -> TransformersEngine:
    try:
        from tether.engines import TransformersEngine
    except ImportError as exc:
        raise SystemExit(
            f"the built-in engine needs torch and transformers ({exc}). "
            "Install them with: pip install torch==2.13.0 && pip install -e '.[engine]'"
        ) from exc
    started = time.monotonic()
    with console.status(f"loading model {model} ..."):
        try:
            engine = TransformersEngine(model, max_batch_size=max_batch_size)
        except (ValueError, FileNotFoundError, RuntimeError) as exc:
            raise SystemExit(f"cannot load model {model!r}: {exc}") from exc
    console.print(f"[green]model[/] {model} loaded in {time.monotonic() - started:.1f}s")
    return engine


def policy_upstream(args: argparse.Namespace, console: Console) -> EngineUpstream | HTTPUpstream:
    if args.upstream:
        return HTTPUpstream(
            HTTPUpstreamConfig(
                name=POLICY_UPSTREAM,
                base_url=args.upstream,
                api_key=args.upstream_key,
                model=args.upstream_model,
                request_token_ids=args.upstream_token_ids,
            )
        )
    return EngineUpstream(load_engine(args.model, args.max_batch_size, console), name=POLICY_UPSTREAM)


# -- the store and the run ----------------------------------------------------------------------------


def add_store_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="the store: a SQLite file path or sqlite:///PATH, memory:, or http(s)://HOST:PORT of a "
        f"`tether serve` (default: ${STORE_ENV}, else .tether/store.db of the project)",
    )
    parser.add_argument(
        "--project-dir", default=None, help="project directory holding .tether/ (default: cwd)"
    )


def add_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run",
        metavar="NAME",
        default=None,
        help="the run's name (default: derived from the command line, so running the same command "
        "again resumes the run: only what is missing runs)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start the run over: the old one is kept under NAME~N, its queued rollouts cancelled",
    )


def open_cli_store(args: argparse.Namespace, command: str) -> Store:
    """The store `--store` names, opened before anything runs; a one-line error if it cannot be."""
    project = Project.at(getattr(args, "project_dir", None))
    url = getattr(args, "store", None)
    try:
        return open_store(url, StoreOptions(project_dir=project.root))
    except StoreURLError as exc:
        raise SystemExit(f"tether {command}: {exc}") from None
    except StoreError as exc:
        raise SystemExit(f"tether {command}: cannot open the store: {exc}") from None


def begin_run(
    store: Store,
    args: argparse.Namespace,
    command: str,
    tasks: Sequence[Task],
    label: str,
    command_line: Mapping[str, Any],
    shape: Mapping[str, Any],
) -> RunRecord:
    """Start (or resume) the run `--run` names, or else the one this command line names: the default
    name hashes `command_line`; `shape` (what decides the run's rollouts) must match on a resume."""
    name = args.run or default_run_name(command, label, command_line)
    try:
        record = start_run(store, name, command, tasks, shape, fresh=args.fresh)
    except RunError as exc:
        raise SystemExit(f"tether {command}: {exc}") from None
    verb = f"resuming run {name} (start {record.starts})" if record.resumed else f"run {name}"
    Console(stderr=True).print(f"[bold]{verb}[/]")
    return record
