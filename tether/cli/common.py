"""Options and wiring shared by the commands that serve the policy (serve, rollout, train)."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tether.cli.secrets import UPSTREAM_KEY, add_secret_arg, secret_value
from tether.contracts import POLICY_UPSTREAM
from tether.policy_server import openai as openai_kind
from tether.policy_server.builtin import options as builtin_kind
from tether.policy_server.vllm import options as vllm_kind
from tether.trainer.placement import LocalPlacement, Placement

if TYPE_CHECKING:
    from tether.gateway.upstreams import Upstream
    from tether.policy_server import PolicyServer, PolicyServerOptions
from tether.contracts import LEARNER_SHARDINGS
from tether.project import Project
from tether.ray.cluster import WEIGHT_TRANSFERS
from tether.runner.runs import RunError, RunRecord, default_run_name, start_run
from tether.store import Store, StoreError, StoreOptions, StoreURLError, Task, open_store
from tether.store.backends import STORE_ENV


def add_policy_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="smollm2-135m",
        help="policy model for the built-in engine: smollm2-135m, tiny-random, or a local HF folder",
    )
    openai_kind.add_args(parser)
    add_secret_arg(parser, UPSTREAM_KEY)
    builtin_kind.add_args(parser)
    vllm_kind.add_args(parser)


def engine_kind(args: argparse.Namespace) -> str:
    """The policy-server kind the command line asks for: builtin, vllm or openai (`--upstream`)."""
    if vllm_kind.chosen(args):
        if getattr(args, "upstream", None):
            raise SystemExit("tether: --upstream and --engine vllm/--policy-server exclude each other")
        return "vllm"
    return "openai" if getattr(args, "upstream", None) else "builtin"


def policy_server_options(args: argparse.Namespace, name: str, log_dir: Path | None) -> PolicyServerOptions:
    from tether.policy_server import PolicyServerOptions

    try:
        vllm = vllm_kind.options_from_args(args)
    except ValueError as exc:
        raise SystemExit(f"tether: {exc}") from None
    return PolicyServerOptions(
        model=args.model,
        name=name,
        log_dir=log_dir,
        need_pause=getattr(args, "async_mode", False),
        lora_rank=getattr(args, "lora_r", 16),
        builtin=builtin_kind.options_from_args(args),
        vllm=vllm,
        openai=openai_kind.options_from_args(args, secret_value(args, UPSTREAM_KEY)),
    )


@contextmanager
def serving_policy(
    args: argparse.Namespace,
    console: Console,
    log_dir: Path | None = None,
    placement: Placement | None = None,
) -> Iterator[Upstream]:
    """The policy's upstream for a command (`--engine`, `--policy-server` or `--upstream`; replicas where
    the placement has them), its server stopped when the command ends, however it ends."""
    kind = engine_kind(args)
    if getattr(args, "adapter", None) is not None and kind != "builtin":
        raise SystemExit("tether: --adapter is loaded by the built-in engine: drop --upstream/--engine vllm")
    options = policy_server_options(args, POLICY_UPSTREAM, log_dir)
    server = (placement or LocalPlacement()).policy_server(kind, options)
    if server is None:
        server = opened_policy_server(kind, options, console)
    try:
        yield server.upstream()
    finally:
        server.close()


STARTING = {"builtin": "loading model {model} ...", "vllm": "starting vLLM for {model} ...", "openai": ""}


def opened_policy_server(kind: str, options: PolicyServerOptions, console: Console) -> PolicyServer:
    """`open_policy_server`, with progress for the slow kinds and its errors as one line."""
    from tether.policy_server import PolicyServerError, open_policy_server

    started = time.monotonic()
    what = STARTING[kind].format(model=options.model)
    if kind == "vllm" and options.vllm.urls:
        what = f"connecting to {len(options.vllm.urls)} vLLM server(s) ..."
    try:
        if what:
            console.print(what)
        server = open_policy_server(kind, options)
    except PolicyServerError as exc:
        raise SystemExit(f"tether: {exc}") from None
    if what:
        console.print(f"[green]{kind} policy server[/] ready in {time.monotonic() - started:.1f}s")
    return server


def add_store_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        help="the store: a SQLite file path or sqlite:///PATH, memory:, postgresql://USER@HOST:PORT/DB "
        f"(never a password here: PGPASSWORD, ~/.pgpass or ${STORE_ENV}), or http(s)://HOST:PORT of a "
        f"`tether serve` (default: ${STORE_ENV}, else .tether/store.db of the project)",
    )
    parser.add_argument("--project-dir", help="project directory holding .tether/ (default: cwd)")


def add_run_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--run",
        metavar="NAME",
        help="the run's name (default: derived from the command line, so running the same command "
        "again resumes the run: only what is missing runs)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start the run over: the old one is kept under NAME~N, its queued rollouts cancelled",
    )


def add_runner_kind_args(parser: argparse.ArgumentParser) -> None:
    """`--runner KIND`: where the agents run (a kind registered in tether/runner/pools.py), and the
    Kubernetes runner's options."""
    from tether.runner.k8s.cli import add_arguments
    from tether.runner.pools import PLACED_KINDS, POOL_KINDS

    parser.add_argument(
        "--runner",
        choices=[kind for kind in POOL_KINDS.kinds() if kind not in PLACED_KINDS],
        default="local",
        help="local: agents are processes on this machine; k8s: one Kubernetes Job per attempt",
    )
    add_arguments(parser)


def runner_pools(args: argparse.Namespace, command: str, tasks: Sequence[Task], agent: Any) -> Any:
    """The pool factory `--runner` names (None: the local pool), checked before anything runs."""
    from tether.runner.k8s.cli import check_unused, kubernetes_pools_for
    from tether.runner.k8s.options import K8sOptionsError

    try:
        if args.runner == "local":
            check_unused(args)
            return None
        if getattr(args, "ray", None):
            raise K8sOptionsError("--ray and --runner k8s both place the agents: choose one")
        return kubernetes_pools_for(args, tasks, agent, Console(stderr=True))
    except (K8sOptionsError, RuntimeError, ValueError) as exc:  # bad options, template or cluster
        raise SystemExit(f"tether {command}: {exc}") from None


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


def add_ray_args(parser: argparse.ArgumentParser, learner: bool = False) -> None:
    """`--ray [ADDRESS]` and its options (see docs/scaling.md); `learner` adds `--learner-ranks`."""
    group = parser.add_argument_group("Ray (docs/scaling.md)")
    group.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="run rollout workers (and replicas, learner ranks) as Ray actors: no ADDRESS starts a local "
        "cluster, `auto` joins the one $RAY_ADDRESS names, else HOST:PORT of a cluster",
    )
    group.add_argument(
        "--agent-cpus", type=float, default=1.0, help="--ray: CPUs each agent reserves (decides placement)"
    )
    group.add_argument(
        "--agent-resources",
        metavar="JSON",
        help="--ray: custom Ray resources each agent needs, e.g. '{\"sandbox\": 1}'",
    )
    group.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="--ray: policy-server replica actors, sticky by rollout (0: serve from this process)",
    )
    group.add_argument("--gpus-per-replica", type=float, help="--ray: default 1 where the cluster has GPUs")
    group.add_argument(
        "--advertise-host",
        metavar="HOST",
        help="--ray: the address other nodes reach the gateway and store at, and that the gateway binds "
        "(default: this node's IP; without --ray the gateway binds 127.0.0.1)",
    )
    group.add_argument(
        "--weights-transfer",
        choices=WEIGHT_TRANSFERS,
        default="auto",
        help="--ray: how policy weights and checkpoints reach actors: by path on a shared filesystem, "
        "or streamed through Ray's object store; auto (default) probes each actor's node",
    )
    if learner:
        group.add_argument(
            "--learner-ranks",
            type=int,
            default=1,
            help="--ray: learner ranks, one torch.distributed group (gloo on CPU, NCCL on GPU)",
        )
        group.add_argument(
            "--learner-sharding",
            choices=LEARNER_SHARDINGS,
            default="replicate",
            help="--ray: replicate (data parallel: every rank holds the whole model) or fsdp (FSDP2: "
            "each rank holds 1/N of the parameters, gradients and optimizer state, for models that do "
            "not fit on one device); the update is the single-rank one either way",
        )
