"""The agent's settings: its command and start, its sandbox, and its quotas."""

from __future__ import annotations

import math
from dataclasses import dataclass

from tether.config.option import Identity, option
from tether.limits import (
    DEFAULT_MAX_ATTEMPT_SPAN_BYTES,
    DEFAULT_MAX_ATTEMPT_SPANS,
    MAX_BODY_BYTES,
    MIB,
)

# `--agent-rewards`: whether rewards the agent reports itself count (None: only without --reward)
AGENT_REWARDS: dict[str, bool | None] = {"auto": None, "count": True, "ignore": False}


def positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise ValueError(f"must be at least 1, got {value}")
    return value


def positive_mib(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"expected a number of MiB, got {text!r}") from None
    if not value * MIB >= 1 or math.isinf(value):
        raise ValueError(f"must be a positive number of MiB, got {text}")
    return value


@dataclass
class AgentSettings:
    """The agent: its command, how it is started, and how its runs are retried and rewarded."""

    command: str | None = option(
        None,
        'the agent command, e.g. "python my_agent.py --q {question}". It is run directly, not by '
        "a shell: each {field} of the task becomes exactly one argument. Do not wrap it in sh -c:"
        " a shell would run whatever a task field says",
        flags=("--agent",),
        dest="agent",
        run="name",
        metavar="COMMAND",
        required=True,
    )
    cwd: str | None = option(
        None,
        "working directory of every agent (default: a fresh scratch directory per attempt, "
        "outside the project, removed afterwards; relative paths in --agent are resolved from "
        "here first)",
        metavar="DIR",
        flags=("--agent-cwd",),
        dest="agent_cwd",
    )
    user: str | None = option(
        None,
        "run agents as this OS user (Tether must run as root), so they cannot read the project's "
        "secret and store. As root, agents in the sandbox run as `nobody` unless this names another "
        "user; `root` keeps them uid 0 (without capabilities): see docs/security.md",
        metavar="USER",
        flags=("--agent-user",),
        dest="agent_user",
    )
    cold: bool = option(
        False,
        "start every agent as a fresh process. By default each Python agent (`python SCRIPT.py "
        "...` or `python -m MODULE ...`) is forked from a warm interpreter of its own Python that"
        " has the script's top-level imports (of the standard library and site-packages only) "
        "loaded, and runs exactly as a cold start would (argv, cwd, environment, exit code, "
        "timeouts; with --sandbox bwrap, the same sandbox). Other commands, modules that start a "
        "thread or open a socket at import, and sandboxed agents with --agent-cwd start cold, "
        "with one line saying why",
        flags=("--agent-cold",),
        dest="agent_cold",
    )
    warm: bool = option(
        False,
        "warm starts, the default (kept so that older command lines still work)",
        flags=("--agent-warm",),
        dest="agent_warm",
    )
    preload: str | None = option(
        None,
        "the comma-separated modules the warm interpreter imports (default: the script's own "
        "top-level imports); not with --agent-cold",
        metavar="MODULES",
        flags=("--agent-preload",),
        dest="agent_preload",
    )
    n_workers: int | None = option(
        4,
        "agents running at once (train: default --group-size x --tasks-per-step)",
    )
    max_attempts: int = option(
        1,
        "attempts per rollout (crash, timeout)",
        run={"rollout": Identity("name"), "optimize-prompt": Identity("name")},
    )
    timeout: float = option(
        300.0,
        "seconds per attempt",
    )
    agent_rewards: str = option(
        "auto",
        "whether rewards the agent reports itself count as its reward: auto counts them only when"
        " there is no --reward evaluator (an agent under training must not grade itself)",
        choices=tuple(AGENT_REWARDS),
    )
    no_air: bool = option(
        False,
        "no automatic intermediate rewards (tool errors, truncation, bad JSON)",
    )


@dataclass
class SandboxSettings:
    """What the agent's process sees of this machine (docs/security.md)."""

    kind: str = option(
        "auto",
        "bwrap: each agent runs under bubblewrap with its own PID, IPC, mount and network "
        "namespaces, an allow-listed environment, a read-only view of the system, its interpreter"
        " and its own folder (nothing else of the host), a writable scratch directory, resource "
        "limits, and no network but the gateway; none: agents are ordinary child processes that "
        "can read and write what Tether can; auto (the default): bwrap where it runs here, else "
        "none with one line saying why",
        choices=["auto", "bwrap", "none"],
        flags=("--sandbox",),
        dest="sandbox",
    )
    env: list[str] = option(
        [],
        "pass this variable of Tether's environment to sandboxed agents (repeatable); they get "
        "only PATH, LANG, LC_*, TZ, TERM and Tether's own variables for the rollout otherwise",
        metavar="NAME",
        flags=("--sandbox-env",),
        dest="sandbox_env",
    )
    hide: list[str] = option(
        [],
        "a file or directory sandboxed agents must not see (repeatable), inside what they are shown",
        metavar="PATH",
        flags=("--sandbox-hide",),
        dest="sandbox_hide",
    )
    show: list[str] = option(
        [],
        "a file or directory sandboxed agents see, read-only (repeatable): they see the system's "
        "/usr, /lib*, /bin and /etc (less what only root may read), their interpreter or virtual "
        "environment, the folders of the files their command names, and nothing else of the host",
        metavar="PATH",
        flags=("--sandbox-show",),
        dest="sandbox_show",
    )
    cpu: int | None = option(
        None,
        "CPU seconds per agent process (RLIMIT_CPU; default 600); 0: no limit",
        metavar="SECONDS",
        flags=("--sandbox-cpu",),
        dest="sandbox_cpu",
    )
    memory: int | None = option(
        None,
        "data (heap and private anonymous memory) per process (RLIMIT_DATA), and the whole sandbox's "
        "memory where Tether may make a cgroup (as root) (default 4096); 0: no limit",
        metavar="MIB",
        flags=("--sandbox-memory",),
        dest="sandbox_memory",
    )
    processes: int | None = option(
        None,
        "processes and threads of the whole sandbox (RLIMIT_NPROC, and a cgroup's cap where Tether may "
        "make one, which holds for uid 0 too; default 256); 0: no limit",
        metavar="N",
        flags=("--sandbox-processes",),
        dest="sandbox_processes",
    )
    scratch: int | None = option(
        None,
        "what the agent may write in its scratch directory (its HOME and TMPDIR), a tmpfs of this size, "
        "so memory rather than the host's disk (default 1024); 0: the host's folder, unlimited",
        metavar="MIB",
        flags=("--sandbox-scratch",),
        dest="sandbox_scratch",
    )


@dataclass
class QuotaSettings:
    """What one agent may send with its rollout token; its model calls the gateway records are never counted
    against them. Refused requests get a 413 (one request too large) or a 429 (the attempt's quota is used
    up), naming the option that raises the limit."""

    max_request_mb: float = option(
        MAX_BODY_BYTES / MIB,
        "refuse (413) a request body larger than this: a model call, a store API request, an OTLP"
        " export (compressed or not)",
        metavar="MIB",
        parse=positive_mib,
    )
    max_spans_per_attempt: int = option(
        DEFAULT_MAX_ATTEMPT_SPANS,
        "spans an attempt's agent may send (OTLP, the tracer, POST /store/spans); past it they "
        "are refused (429) and the rest of the attempt runs as usual",
        metavar="N",
        parse=positive_count,
    )
    max_span_mb_per_attempt: float = option(
        DEFAULT_MAX_ATTEMPT_SPAN_BYTES / MIB,
        "MiB of spans (names, attributes, events) an attempt's agent may send; past it they are "
        "refused (429). The runner reads an attempt's spans back whole to score it: this bounds "
        "that",
        metavar="MIB",
        parse=positive_mib,
    )
