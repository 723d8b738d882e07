"""The policy server, an upstream instead of it, and the gateway `tether serve` runs."""

from __future__ import annotations

from dataclasses import dataclass

from tether.config.option import Identity, option
from tether.contracts import (
    DEFAULT_BODY_TIMEOUT_S,
    DEFAULT_HEADER_TIMEOUT_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_MAX_TOKENS_CAP,
    DEFAULT_N_CAP,
)
from tether.policy_server.builtin.options import DEFAULT_MAX_BATCH_SIZE
from tether.policy_server.vllm.options import ENGINE_ENV


@dataclass
class ServerSettings:
    """The policy server: the model and the engine that serves it."""

    model: str = option(
        "smollm2-135m",
        "policy model for the built-in engine: smollm2-135m, tiny-random, or a local HF folder "
        "(default: $TETHER_MODEL, else smollm2-135m)",
        env="TETHER_MODEL",
        run={
            "train": Identity("shape"),
            "rollout": Identity("name", value=lambda model, tree: tree.upstream.upstream or model),
            "optimize-prompt": Identity("name", value=lambda model, tree: tree.upstream.upstream or model),
        },
    )
    engine: str = option(
        "builtin",
        "the older spelling of --policy-server builtin|vllm: Tether's engine in this process, or a "
        "vLLM server that Tether starts from its own environment (default: $TETHER_ENGINE, else "
        "builtin)",
        choices=["builtin", "vllm"],
        env=ENGINE_ENV,
    )
    policy_server: str | None = option(
        None,
        "the policy server, a kind registered in tether/policy_server: builtin (the engine in this "
        "process), vllm (vLLM servers Tether starts, --vllm-*), openai (any OpenAI-compatible server "
        "at --upstream, never trained); or the URLs of running vLLM servers (replicas) to use instead "
        "of starting one, each with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (checked "
        "at start). Default: --engine's, or openai with --upstream",
        metavar="KIND|URL[,URL...]",
    )
    vllm_python: str | None = option(
        None,
        "the Python of the vLLM environment (default: $TETHER_VLLM_PYTHON, else "
        ".venv-vllm/bin/python; `make setup-vllm` creates it)",
        metavar="PATH",
    )
    vllm_replicas: int = option(
        1,
        "vLLM servers to start",
        metavar="N",
    )
    vllm_port: int = option(
        0,
        "first vLLM port (default: free ports)",
        metavar="PORT",
    )
    vllm_args: str = option(
        "",
        "extra arguments for the vLLM servers Tether starts, as one string, e.g. "
        "'--gpu-memory-utilization 0.8 --max-model-len 4096'",
        metavar="ARGS",
    )
    max_batch_size: int = option(
        DEFAULT_MAX_BATCH_SIZE,
        "built-in engine: requests per batch (a rollout with nothing running may still join a "
        "full batch, so that no rollout waits behind another's long generations)",
    )
    prefix_cache_mb: float | None = option(
        None,
        "built-in engine: MiB of the model device's memory for the keys and values of prompts and"
        " responses, so that a group's samples and a conversation's next turn prefill only their "
        "new tokens (default 512; 0 disables it)",
    )


@dataclass
class UpstreamSettings:
    """An OpenAI-compatible server to call instead of serving the policy here."""

    upstream: str | None = option(
        None,
        "forward calls to this OpenAI-compatible base URL instead of the built-in engine",
        metavar="URL",
    )
    upstream_model: str | None = option(
        None,
        "model name to send to --upstream",
        metavar="NAME",
    )
    upstream_token_ids: bool = option(
        False,
        "ask --upstream for token ids (vLLM's return_token_ids)",
    )


@dataclass
class GatewaySettings:
    """The gateway `tether serve` runs: where it listens and what it routes."""

    adapter: str | None = option(
        None,
        "built-in engine: serve --model with this LoRA adapter (a run's policies/vN or "
        "checkpoint/policy folder), e.g. as the teacher of `tether train --algorithm opd`",
        metavar="DIR",
    )
    route: list[str] = option(
        [],
        "route a model name to an upstream (repeatable); '*=policy' is the default",
        metavar="ALIAS=UPSTREAM",
    )
    host: str = option(
        "127.0.0.1",
        "interface to bind (loopback by default)",
    )
    port: int = option(
        8000,
        "port to bind (0 picks a free one)",
    )
    no_session: bool = option(
        False,
        "do not open an ad-hoc session rollout",
    )
    log_level: str = option(
        "warning",
        "uvicorn log level",
    )
    session_idle: float = option(
        1800.0,
        "a named session (POST /sessions/open with the deploy key) without a model call for this long "
        "closes; 0: sessions close only when ended (POST /sessions/NAME/end)",
        metavar="SECONDS",
    )
    sessions_run: str = option(
        "sessions",
        "the store run that holds this deployment's named sessions (what `tether train --from-sessions "
        "RUN` trains on)",
        metavar="RUN",
    )
    max_session_rewards: int = option(
        100,
        "rewards one session takes (POST /sessions/NAME/rewards with the reward key); past it, 429",
        metavar="N",
    )
    heartbeat_timeout: float = option(
        DEFAULT_HEARTBEAT_TIMEOUT_S,
        "a running attempt whose worker has not heartbeated for this long is timed out and its "
        "rollout requeued (checked at start, so a restart recovers what was running, then "
        "periodically)",
        metavar="SECONDS",
    )


@dataclass
class CapSettings:
    """What one model call may ask of the gateway: more tokens are lowered to the cap (the span records
    what was asked), more choices refused (400) naming it."""

    max_tokens_cap: int = option(
        DEFAULT_MAX_TOKENS_CAP,
        "the most tokens one call generates: a call asking for more (max_tokens, max_completion_tokens,"
        " Responses max_output_tokens, Messages max_tokens) gets this many, its span recording what it"
        " asked",
        metavar="N",
    )
    n_cap: int = option(
        DEFAULT_N_CAP,
        "refuse (400) a call asking for more choices than this (n, best_of)",
        metavar="N",
    )


@dataclass
class LimitSettings(CapSettings):
    """The gateway's limits on one request: the caps, and how long a client may take to send it."""

    header_timeout: float = option(
        DEFAULT_HEADER_TIMEOUT_S,
        "close a connection that has not sent a request's headers within this time (0: never)",
        metavar="SECONDS",
    )
    body_timeout: float = option(
        DEFAULT_BODY_TIMEOUT_S,
        "close a connection that has not sent a request's body within this time after its headers (0: never)",
        metavar="SECONDS",
    )
