"""Options and wiring shared by the commands that serve the policy (serve, rollout, train)."""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from tether.cli.secrets import UPSTREAM_KEY, secret_value
from tether.contracts import POLICY_UPSTREAM
from tether.placement.base import LocalPlacement, Placement
from tether.policy_server.builtin.options import BuiltinOptions
from tether.policy_server.openai import OpenAIOptions
from tether.policy_server.vllm.options import VLLMOptions

if TYPE_CHECKING:
    from tether.gateway.upstreams import Upstream
    from tether.policy_server import PolicyServer, PolicyServerOptions
from tether.project import Project
from tether.runner.runs import RunError, RunRecord, default_run_name, start_run
from tether.store import Store, StoreError, StoreOptions, StoreURLError, Task, open_store


def engine_kind(args: argparse.Namespace) -> str:
    """The policy-server kind the command line names: `--policy-server KIND` (a kind registered in
    tether/policy_server), else vllm for `--policy-server URL,...` or `--engine vllm`, openai for
    `--upstream URL`, builtin otherwise."""
    named = getattr(args, "policy_server", None)
    upstream = getattr(args, "upstream", None)
    if _names_a_kind(named):
        kind = str(named)
    elif named and not all(url.strip().startswith(("http://", "https://")) for url in named.split(",")):
        from tether.policy_server import SERVERS

        raise SystemExit(
            f"tether: --policy-server {named!r} is neither a kind ({', '.join(sorted(SERVERS.kinds()))}) "
            "nor the URLs of running vLLM servers (http://HOST:PORT, comma-separated)"
        )
    elif named or getattr(args, "engine", "builtin") == "vllm":
        kind = "vllm"  # URLs of running vLLM servers, or the older `--engine vllm`
    else:
        kind = "openai" if upstream else "builtin"
    if kind == "openai" and not upstream:
        raise SystemExit("tether: --policy-server openai forwards to --upstream URL: give it")
    if upstream and kind != "openai":
        raise SystemExit(
            f"tether: --upstream is the openai policy server's: drop it, or --policy-server {kind}"
        )
    return kind


def request_caps(args: argparse.Namespace) -> tuple[int, int]:
    """The tokens and the choices one model call may ask for (`--max-tokens-cap`, `--n-cap`)."""
    if args.max_tokens_cap < 1 or args.n_cap < 1:
        raise SystemExit(f"tether {args.command}: --max-tokens-cap and --n-cap must be at least 1")
    return args.max_tokens_cap, args.n_cap


def _names_a_kind(policy_server: str | None) -> bool:
    """Whether `--policy-server` names a registered kind (else it lists running vLLM servers' URLs)."""
    from tether.policy_server import SERVERS

    return policy_server in SERVERS.kinds()


def _vllm_urls(args: argparse.Namespace) -> tuple[str, ...]:
    named = args.policy_server or ""
    return () if _names_a_kind(named) else tuple(u.strip() for u in named.split(",") if u.strip())


def policy_server_options(args: argparse.Namespace, name: str, log_dir: Path | None) -> PolicyServerOptions:
    from tether.policy_server import PolicyServerOptions

    if args.vllm_replicas < 1:
        raise SystemExit("tether: --vllm-replicas must be at least 1")
    adapter = getattr(args, "adapter", None)
    upstream = getattr(args, "upstream", None)
    return PolicyServerOptions(
        model=args.model,
        name=name,
        log_dir=log_dir,
        need_pause=getattr(args, "async_mode", False),
        lora_rank=getattr(args, "lora_r", 16),
        builtin=BuiltinOptions(
            max_batch_size=args.max_batch_size,
            prefix_cache_mb=args.prefix_cache_mb,
            adapter=None if adapter is None else Path(adapter),
        ),
        vllm=VLLMOptions(
            urls=_vllm_urls(args),
            replicas=args.vllm_replicas,
            python=args.vllm_python,
            args=tuple(shlex.split(args.vllm_args)),
            port=args.vllm_port,
        ),
        openai=None
        if not upstream
        else OpenAIOptions(
            upstream, secret_value(args, UPSTREAM_KEY), args.upstream_model, args.upstream_token_ids
        ),
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


def runner_pools(args: argparse.Namespace, command: str, tasks: Sequence[Task], agent: Any) -> Any:
    """The pool factory `--runner` names (None: the local pool), checked before anything runs."""
    from tether.cli.k8s_args import check_unused, kubernetes_pools_for
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
