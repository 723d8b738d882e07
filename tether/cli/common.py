"""Options and wiring shared by the commands that serve the policy (serve, rollout, train)."""

from __future__ import annotations

import argparse
import os
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tether.cli.secrets import UPSTREAM_KEY, add_secret_arg, secret_value
from tether.contracts import POLICY_UPSTREAM
from tether.gateway import EngineUpstream, HTTPUpstream, HTTPUpstreamConfig

if TYPE_CHECKING:
    from tether.engines.transformers_engine import TransformersEngine
    from tether.gateway.upstreams import Upstream
    from tether.policy_server import PolicyServer, PolicyServerOptions
from tether.project import Project
from tether.ray.cluster import LEARNER_SHARDINGS, WEIGHT_TRANSFERS
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
    add_secret_arg(parser, UPSTREAM_KEY)
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
    add_engine_args(parser)


ENGINE_ENV = "TETHER_ENGINE"


def add_engine_args(parser: argparse.ArgumentParser) -> None:
    """Which engine serves the policy: the built-in one in this process, or vLLM (started by Tether, or
    servers the user started)."""
    group = parser.add_argument_group("policy engine")
    group.add_argument(
        "--engine",
        choices=["builtin", "vllm"],
        default=os.environ.get(ENGINE_ENV) or "builtin",
        help=f"builtin: Tether's engine in this process; vllm: a vLLM server that Tether starts from its "
        f"own environment (default: ${ENGINE_ENV}, else builtin)",
    )
    group.add_argument(
        "--policy-server",
        metavar="URL[,URL...]",
        help="serve the policy with these running vLLM servers (replicas), instead of starting one; each "
        "needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (checked at start)",
    )
    group.add_argument(
        "--vllm-python",
        metavar="PATH",
        help="the Python of the vLLM environment (default: $TETHER_VLLM_PYTHON, else .venv-vllm/bin/python; "
        "`make setup-vllm` creates it)",
    )
    group.add_argument("--vllm-replicas", type=int, default=1, metavar="N", help="vLLM servers to start")
    group.add_argument(
        "--vllm-port", type=int, default=0, metavar="PORT", help="first vLLM port (default: free ports)"
    )
    group.add_argument(
        "--vllm-args",
        default="",
        metavar="ARGS",
        help="extra arguments for the vLLM servers Tether starts, as one string, e.g. "
        "'--gpu-memory-utilization 0.8 --max-model-len 4096'",
    )


def engine_kind(args: argparse.Namespace) -> str:
    return "vllm" if getattr(args, "policy_server", None) or args.engine == "vllm" else "builtin"


def policy_server_options(args: argparse.Namespace, name: str, log_dir: Path | None) -> PolicyServerOptions:
    from tether.policy_server import PolicyServerOptions

    if args.vllm_replicas < 1:
        raise SystemExit("tether: --vllm-replicas must be at least 1")
    urls = tuple(u.strip() for u in (args.policy_server or "").split(",") if u.strip())
    return PolicyServerOptions(
        model=args.model,
        name=name,
        max_batch_size=getattr(args, "max_batch_size", 8),
        urls=urls,
        replicas=args.vllm_replicas,
        engine_python=args.vllm_python,
        engine_args=tuple(shlex.split(args.vllm_args)),
        port=args.vllm_port,
        lora_rank=getattr(args, "lora_r", 16),
        log_dir=log_dir,
        need_pause=getattr(args, "async_mode", False),
    )


@contextmanager
def vllm_policy(args: argparse.Namespace, console: Console, log_dir: Path | None) -> Iterator[PolicyServer]:
    """The vLLM policy server the command asked for, stopped when the command ends, however it ends."""
    from tether.policy_server import open_policy_server
    from tether.policy_server.vllm import VLLMError, VLLMSetupError

    options = policy_server_options(args, POLICY_UPSTREAM, log_dir)
    started = time.monotonic()
    what = f"{len(options.urls)} vLLM server(s)" if options.urls else f"vLLM for {args.model}"
    console.print(f"starting {what} ...")
    try:
        server = open_policy_server("vllm", options)
    except (VLLMSetupError, VLLMError) as exc:
        raise SystemExit(f"tether: {exc}") from None
    console.print(f"[green]vLLM[/] ready in {time.monotonic() - started:.0f}s")
    try:
        yield server
    finally:
        server.close()


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


@contextmanager
def serving_policy(
    args: argparse.Namespace, console: Console, log_dir: Path | None = None
) -> Iterator[Upstream]:
    """The policy's upstream for a command: vLLM (managed or external), --upstream, or the built-in engine."""
    if getattr(args, "adapter", None) is not None and (engine_kind(args) == "vllm" or args.upstream):
        raise SystemExit("tether: --adapter is loaded by the built-in engine: drop --upstream/--engine vllm")
    if engine_kind(args) == "vllm":
        if args.upstream:
            raise SystemExit("tether: --upstream and --engine vllm/--policy-server exclude each other")
        with vllm_policy(args, console, log_dir) as server:
            yield server.upstream()
        return
    yield policy_upstream(args, console)


def policy_upstream(args: argparse.Namespace, console: Console) -> EngineUpstream | HTTPUpstream:
    if args.upstream:
        return HTTPUpstream(
            HTTPUpstreamConfig(
                name=POLICY_UPSTREAM,
                base_url=args.upstream,
                api_key=secret_value(args, UPSTREAM_KEY),
                model=args.upstream_model,
                request_token_ids=args.upstream_token_ids,
            )
        )
    engine = load_engine(args.model, args.max_batch_size, console)
    adapter = getattr(args, "adapter", None)
    if adapter is not None:
        _load_served_adapter(engine, Path(adapter), console)
    return EngineUpstream(engine, name=POLICY_UPSTREAM)


def _load_served_adapter(engine: TransformersEngine, adapter: Path, console: Console) -> None:
    """`tether serve --adapter DIR`: the built-in engine serves the model with this LoRA adapter."""
    if not (adapter / "adapter_config.json").is_file():
        engine.close()
        raise SystemExit(f"tether serve: --adapter {adapter}: no LoRA adapter there (no adapter_config.json)")
    try:
        engine.load_adapter(str(adapter))
    except (ValueError, RuntimeError, OSError) as exc:
        engine.close()
        raise SystemExit(
            f"tether serve: --adapter {adapter}: cannot load it onto {engine.name}: {exc}"
        ) from None
    console.print(f"[green]adapter[/] {adapter} loaded")


# -- the store and the run ----------------------------------------------------------------------------


def add_store_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="the store: a SQLite file path or sqlite:///PATH, memory:, postgresql://USER@HOST:PORT/DB "
        f"(never a password here: PGPASSWORD, ~/.pgpass or ${STORE_ENV}), or http(s)://HOST:PORT of a "
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


def add_runner_kind_args(parser: argparse.ArgumentParser) -> None:
    """`--runner KIND`: where the agents run (a kind registered in tether/runner/pools.py), and the
    Kubernetes runner's options."""
    from tether.runner.k8s.cli import add_arguments
    from tether.runner.pools import POOL_KINDS

    parser.add_argument(
        "--runner",
        choices=POOL_KINDS.kinds(),
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


# -- Ray ----------------------------------------------------------------------------------------------


def add_ray_args(parser: argparse.ArgumentParser, learner: bool = False) -> None:
    """`--ray [ADDRESS]` and its options (see docs/scaling.md); `learner` adds `--learner-ranks`."""
    group = parser.add_argument_group("Ray (docs/scaling.md)")
    group.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
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
        default=None,
        help="--ray: custom Ray resources each agent needs, e.g. '{\"sandbox\": 1}'",
    )
    group.add_argument(
        "--replicas",
        type=int,
        default=0,
        help="--ray: policy-server replica actors, sticky by rollout (0: serve from this process)",
    )
    group.add_argument(
        "--gpus-per-replica", type=float, default=None, help="--ray: default 1 where the cluster has GPUs"
    )
    group.add_argument(
        "--advertise-host",
        metavar="HOST",
        default=None,
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
