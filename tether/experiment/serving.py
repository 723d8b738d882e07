"""The policy server a command's settings ask for (`--policy-server`, `--engine`, `--upstream`), its
options, and the server itself, opened with progress and stopped when the command ends."""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from tether.config.serving import ServerSettings, UpstreamSettings
from tether.contracts import POLICY_UPSTREAM
from tether.experiment.errors import SettingsError
from tether.placement.base import LocalPlacement, Placement
from tether.policy_server.builtin.options import BuiltinOptions
from tether.policy_server.openai import OpenAIOptions
from tether.policy_server.vllm.options import VLLMOptions

if TYPE_CHECKING:
    from tether.policy_server import PolicyServer, PolicyServerOptions


def engine_kind(server: ServerSettings, upstream: UpstreamSettings | None = None) -> str:
    """The policy-server kind the settings name: `--policy-server KIND` (a kind registered in
    tether/policy_server), else vllm for `--policy-server URL,...` or `--engine vllm`, openai for
    `--upstream URL`, builtin otherwise."""
    named = server.policy_server
    url = upstream.upstream if upstream is not None else None
    if _names_a_kind(named):
        kind = str(named)
    elif named and not all(u.strip().startswith(("http://", "https://")) for u in named.split(",")):
        from tether.policy_server import SERVERS

        raise SettingsError(
            f"tether: --policy-server {named!r} is neither a kind ({', '.join(sorted(SERVERS.kinds()))}) "
            "nor the URLs of running vLLM servers (http://HOST:PORT, comma-separated)"
        )
    elif named or server.engine == "vllm":
        kind = "vllm"  # URLs of running vLLM servers, or the older `--engine vllm`
    else:
        kind = "openai" if url else "builtin"
    if kind == "openai" and not url:
        raise SettingsError("tether: --policy-server openai forwards to --upstream URL: give it")
    if url and kind != "openai":
        raise SettingsError(
            f"tether: --upstream is the openai policy server's: drop it, or --policy-server {kind}"
        )
    return kind


def _names_a_kind(policy_server: str | None) -> bool:
    """Whether `--policy-server` names a registered kind (else it lists running vLLM servers' URLs)."""
    from tether.policy_server import SERVERS

    return policy_server in SERVERS.kinds()


def _vllm_urls(server: ServerSettings) -> tuple[str, ...]:
    named = server.policy_server or ""
    return () if _names_a_kind(named) else tuple(u.strip() for u in named.split(",") if u.strip())


def policy_server_options(
    server: ServerSettings,
    upstream: UpstreamSettings | None,
    upstream_key: str | None,
    name: str,
    log_dir: Path | None,
    *,
    adapter: str | None = None,
    need_pause: bool = False,
    lora_rank: int = 16,
) -> PolicyServerOptions:
    from tether.policy_server import PolicyServerOptions

    if server.vllm_replicas < 1:
        raise SettingsError("tether: --vllm-replicas must be at least 1")
    url = upstream.upstream if upstream is not None else None
    return PolicyServerOptions(
        model=server.model,
        name=name,
        log_dir=log_dir,
        need_pause=need_pause,
        lora_rank=lora_rank,
        builtin=BuiltinOptions(
            max_batch_size=server.max_batch_size,
            prefix_cache_mb=server.prefix_cache_mb,
            adapter=None if adapter is None else Path(adapter),
        ),
        vllm=VLLMOptions(
            urls=_vllm_urls(server),
            replicas=server.vllm_replicas,
            python=server.vllm_python,
            args=tuple(shlex.split(server.vllm_args)),
            port=server.vllm_port,
        ),
        openai=None
        if upstream is None or not url
        else OpenAIOptions(url, upstream_key, upstream.upstream_model, upstream.upstream_token_ids),
    )


@contextmanager
def served_policy(
    server: ServerSettings,
    upstream: UpstreamSettings | None,
    upstream_key: str | None,
    console: Console,
    log_dir: Path | None = None,
    placement: Placement | None = None,
    adapter: str | None = None,
) -> Iterator[PolicyServer]:
    """The policy's server for a command (`--engine`, `--policy-server` or `--upstream`; replicas where the
    placement has them), stopped when the command ends, however it ends. Its `upstream()` is what the
    gateway calls; a command that also loads weights into it (a canary) keeps the server."""
    kind = engine_kind(server, upstream)
    if adapter is not None and kind != "builtin":
        raise SettingsError(
            "tether: --adapter is loaded by the built-in engine: drop --upstream/--engine vllm"
        )
    options = policy_server_options(server, upstream, upstream_key, POLICY_UPSTREAM, log_dir, adapter=adapter)
    opened = (placement or LocalPlacement()).policy_server(kind, options)
    if opened is None:
        opened = opened_policy_server(kind, options, console)
    try:
        yield opened
    finally:
        opened.close()


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
        raise SettingsError(f"tether: {exc}") from None
    if what:
        console.print(f"[green]{kind} policy server[/] ready in {time.monotonic() - started:.1f}s")
    return server
