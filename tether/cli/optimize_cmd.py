"""`tether optimize-prompt`: search for a better system prompt for an unmodified agent (APO or Pareto)."""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from tether.cli.options import add_settings, settings_from_args
from tether.cli.secrets import JUDGE_KEY, OPTIMIZER_KEY, UPSTREAM_KEY, add_secret_arg, secrets_of
from tether.config.commands import OptimizePromptSettings
from tether.config.option import run_identity
from tether.contracts import DEFAULT_ROUTE, POLICY_UPSTREAM
from tether.experiment.assembly import open_experiment
from tether.experiment.inputs import load_inputs, runner_config
from tether.experiment.progress import progress_bar
from tether.experiment.secrets import Secrets
from tether.gateway import HTTPUpstream, HTTPUpstreamConfig
from tether.gateway.upstreams import Upstream
from tether.prompt_search.apo import APOConfig, run_apo
from tether.prompt_search.pareto import ParetoConfig, run_pareto
from tether.prompt_search.search import (
    OPTIMIZER_AGENT,
    Budget,
    Candidate,
    CandidateRunner,
    OptimizerLLM,
    SearchContext,
    SearchError,
    SearchResult,
)
from tether.runner import RewardError, Runner, TaskFileError, load_tasks
from tether.runner.rewards import Evaluator, check_reference_reader
from tether.store import RolloutStatus, Store, Task

console = Console(stderr=True)
OPTIMIZER_ROUTE = "tether-optimizer"  # the model alias the optimizer's calls use through the gateway
ROW_KEYS = ("round", "candidate", "origin", "parents", "score", "status", "spent")  # of `SearchResult.rows`


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "optimize-prompt",
        help="search for a better system prompt for an agent, without changing its code",
        description=(
            "Runs the agent with candidate system prompts (the gateway puts the candidate into the agent's "
            "calls, or the agent reads it with tether.get_prompt), asks an optimizer model to criticize and "
            "rewrite them from the recorded runs, and keeps the best by validation score. Every candidate "
            "is stored as a version of the prompt resource, with its score and parents."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_settings(parser, OptimizePromptSettings())
    add_secret_arg(parser, JUDGE_KEY)
    add_secret_arg(parser, UPSTREAM_KEY)
    add_secret_arg(parser, OPTIMIZER_KEY)
    parser.set_defaults(command_main=run)


@dataclass
class Inputs:
    tasks: list[Task]
    val_tasks: list[Task]
    evaluator: Evaluator | None
    agent: Any
    initial: str | None


def _inputs(args: argparse.Namespace, settings: OptimizePromptSettings, secrets: Secrets) -> Inputs:
    tasks, evaluator, agent = load_inputs(settings, secrets.judge_key)
    try:
        val_tasks = load_tasks(args.val_tasks)
        check_reference_reader(evaluator, val_tasks)
    except (TaskFileError, RewardError) as exc:
        raise SystemExit(f"tether: {exc}") from None
    initial = None
    if args.initial_prompt:
        try:
            initial = Path(args.initial_prompt).read_text().strip()
        except OSError as exc:
            raise SystemExit(f"tether: cannot read --initial-prompt: {exc.strerror or exc}") from None
        if not initial:
            raise SystemExit(f"tether: the initial prompt file {args.initial_prompt} is empty")
    return Inputs(tasks, val_tasks, evaluator, agent, initial)


def _configs(args: argparse.Namespace) -> APOConfig | ParetoConfig:
    shared = {"budget": args.budget, "val_batch_size": args.val_batch_size, "seed": args.seed}
    try:
        if args.algorithm == "apo":
            apo = {"beam_width": args.beam_width, "branch_factor": args.branch_factor, "rounds": args.rounds}
            return APOConfig(**apo, batch_size=args.batch_size, **shared)
        pareto = {"merge_probability": args.merge_probability, "max_iterations": args.max_iterations}
        return ParetoConfig(**pareto, minibatch_size=args.batch_size, **shared)
    except ValueError as exc:
        raise SystemExit(f"tether optimize-prompt: {exc}") from None


def run(args: argparse.Namespace) -> int:
    settings: OptimizePromptSettings = settings_from_args(args)
    secrets = secrets_of(args)
    inputs = _inputs(args, settings, secrets)
    config = _configs(args)
    runner_settings = runner_config(settings.agent, settings.rewards.primary_reward)
    named, shape = run_identity(settings, "optimize-prompt")  # the settings' declarations
    pool_tasks = [*inputs.tasks, *inputs.val_tasks]
    experiment = open_experiment(
        settings, "optimize-prompt", console, inputs.tasks, inputs.agent, named, shape, pool_tasks=pool_tasks
    )
    store = experiment.store
    upstreams, routes, optimizer_model = _optimizer_route(args, secrets.optimizer_key)
    started = time.monotonic()
    try:
        with experiment.serving(settings, secrets.upstream_key, console, upstreams, routes) as stack:
            session = store.start_session(
                {"purpose": "prompt-optimizer"}, worker_id=OPTIMIZER_AGENT, mode=OPTIMIZER_AGENT
            )
            creds = stack.gateway.credentials(session.rollout.id, session.attempt.number)
            optimizer = OptimizerLLM(
                creds["base_url"],
                optimizer_model,
                creds["api_key"],
                temperature=args.optimizer_temperature,
                max_tokens=args.optimizer_max_tokens,
            )
            try:
                with progress_bar(console) as progress:
                    bar = progress.add_task("rollouts", total=config.budget, detail="")
                    runner = Runner(
                        store,
                        inputs.agent,
                        stack.endpoints,
                        inputs.evaluator,
                        runner_settings,
                        on_update=lambda r: progress.update(
                            bar,
                            completed=r.stats.succeeded + r.stats.failed,
                            detail=f"running {r.stats.running}",
                        ),
                        run=experiment.record.name,
                        pools=experiment.placement.pools(experiment.authority, experiment.pools),
                    )
                    result = asyncio.run(
                        _search(args, inputs, config, store, runner, optimizer, progress.console)
                    )
            finally:
                # The optimizer's calls are recorded but are no training data: the rollout ends cancelled.
                store.update_status(
                    session.rollout.id,
                    RolloutStatus.cancelled,
                    error="prompt optimizer calls: not training data",
                )
    except SearchError as exc:
        raise SystemExit(f"tether optimize-prompt: {exc}") from None
    finally:
        store.close()
        inputs.agent.close()
    _report(result, args, time.monotonic() - started)
    return 0


def _optimizer_route(
    args: argparse.Namespace, optimizer_key: str | None
) -> tuple[list[Upstream], dict[str, str] | None, str]:
    """The optimizer's upstream and routes, and the model name it asks the gateway for: the policy
    itself, or an external endpoint under its own alias."""
    if args.optimizer_endpoint == POLICY_UPSTREAM:
        return [], None, args.optimizer_model or POLICY_UPSTREAM
    upstream = HTTPUpstream(
        HTTPUpstreamConfig(
            name=OPTIMIZER_AGENT,
            base_url=args.optimizer_endpoint,
            api_key=optimizer_key,
            model=args.optimizer_model,
            request_logprobs=False,
        )
    )
    return [upstream], {DEFAULT_ROUTE: POLICY_UPSTREAM, OPTIMIZER_ROUTE: OPTIMIZER_AGENT}, OPTIMIZER_ROUTE


async def _search(
    args: argparse.Namespace,
    inputs: Inputs,
    config: APOConfig | ParetoConfig,
    store: Store,
    runner: Runner,
    optimizer: OptimizerLLM,
    out: Console,
) -> SearchResult:
    val = random.Random(args.seed).sample(inputs.val_tasks, min(config.val_batch_size, len(inputs.val_tasks)))
    candidates = CandidateRunner(
        store,
        runner,
        Budget(config.budget),
        prompt_name=args.prompt_name,
        override_mode=args.override,
        run_id=runner.run_name or "prompt-search",
        max_attempts=args.max_attempts,
    )
    ctx = SearchContext(
        candidates,
        optimizer,
        inputs.tasks,
        val,
        args.algorithm,
        args.seed,
        lambda c: _show(out, c, config.budget),
    )
    try:
        if isinstance(config, APOConfig):
            return await run_apo(ctx, config, inputs.initial)
        return await run_pareto(ctx, config, inputs.initial)
    finally:
        await runner.stop()


def _show(out: Console, candidate: Candidate, budget: int) -> None:
    origin = candidate.origin + (f" of {','.join(candidate.parents)}" if candidate.parents else "")
    status = candidate.status if candidate.reason is None else f"{candidate.status} ({candidate.reason})"
    out.print(
        f"round {candidate.round:>2}  {candidate.id:<4} {origin:<20} score {_fmt(candidate.score)}  "
        f"{status}  rollouts {candidate.spent_after}/{budget}"
    )


def _report(result: SearchResult, args: argparse.Namespace, seconds: float) -> None:
    table = Table(title=f"prompt search ({args.algorithm})")
    for column in ("round", "candidate", "origin", "parents", "score", "status", "rollouts spent"):
        table.add_column(column)
    for row in result.rows():
        cells = {**row, "score": _fmt(row["score"])}
        table.add_row(*(str(cells[key]) for key in ROW_KEYS))
    out = Console()
    out.print(table)
    Path(args.out).write_text(result.best.text + "\n")
    out.print(
        f"[bold]validation score: initial {_fmt(result.initial.score)} -> best {_fmt(result.best.score)} "
        f"({result.best.id})[/]\n"
        f"spent {result.spent} of {result.budget} rollouts, {result.optimizer_calls} optimizer calls, "
        f"{seconds:.1f}s; stopped: {result.stopped}\n"
        f"best prompt written to {args.out}; history in the store as resource {args.prompt_name!r}",
        soft_wrap=True,
    )


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
