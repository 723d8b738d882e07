"""`--sandbox KIND` and its options, for every command that launches agents (rollout, train,
optimize-prompt): defined here once, turned into the `Sandbox` that `CommandAgent` takes."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
from collections.abc import Callable
from typing import Any

from tether.project import Project
from tether.rewards import evaluator_files
from tether.runner.agents import PRIVATE_VARIABLES
from tether.runner.sandbox import (
    SANDBOXES,
    Sandbox,
    SandboxLimits,
    SandboxOptions,
    open_sandbox,
    project_hide,
    python_environment,
)

DEFAULTS = SandboxLimits()
# The options that only mean something with a sandbox.
SANDBOX_ONLY = ("--sandbox-env", "--sandbox-hide", "--sandbox-cpu", "--sandbox-memory", "--sandbox-processes")


def add_sandbox_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sandbox (--sandbox bwrap, see docs/security.md)")
    group.add_argument(
        "--sandbox",
        choices=SANDBOXES.kinds(),
        default="none",
        help="none: agents are ordinary child processes; bwrap: each runs under bubblewrap with its own "
        "PID, IPC, mount and network namespaces, an allow-listed environment, the file system read-only "
        "but for its scratch directory, the project's state and the task and evaluator files hidden, "
        "resource limits, and no network but the gateway",
    )
    group.add_argument(
        "--sandbox-env",
        metavar="NAME",
        action="append",
        default=[],
        help="pass this variable of Tether's environment to sandboxed agents (repeatable); they get only "
        "PATH, LANG, LC_*, TZ, TERM and Tether's own variables for the rollout otherwise",
    )
    group.add_argument(
        "--sandbox-hide",
        metavar="PATH",
        action="append",
        default=[],
        help="a file or directory sandboxed agents must not see (repeatable), e.g. ~/.ssh",
    )
    limits = (
        ("--sandbox-cpu", "SECONDS", f"CPU seconds per agent process (RLIMIT_CPU; default {DEFAULTS.cpu_s})"),
        ("--sandbox-memory", "MIB", f"address space per process (RLIMIT_AS; default {DEFAULTS.memory_mib})"),
        (
            "--sandbox-processes",
            "N",
            f"processes and threads of the whole sandbox (RLIMIT_NPROC, not applied to uid 0: as root "
            f"add --agent-user; default {DEFAULTS.processes})",
        ),
    )
    for flag, metavar, text in limits:
        group.add_argument(flag, type=int, metavar=metavar, help=f"{text}; 0: no limit")


def sandbox_from_args(
    args: argparse.Namespace, evaluator: Callable[..., Any] | None, *others: Any
) -> Sandbox | None:
    """The sandbox the options ask for (None: none). Raises ValueError naming what is wrong."""
    if args.sandbox == "none":
        given = [flag for flag in SANDBOX_ONLY if getattr(args, flag[2:].replace("-", "_"), None)]
        if given:
            raise ValueError(f"{given[0]} is an option of the sandbox: add --sandbox bwrap")
        return None
    if getattr(args, "runner", "local") != "local" or getattr(args, "ray", None):
        raise ValueError(
            f"--sandbox {args.sandbox} confines agents launched on this machine: with --runner k8s the "
            "Job's pod is the boundary (docs/security.md), and --ray does not take a sandbox yet"
        )
    private = sorted(set(args.sandbox_env) & PRIVATE_VARIABLES)
    if private:
        raise ValueError(f"--sandbox-env {private[0]}: Tether's own settings and secrets never reach agents")
    options = SandboxOptions(
        limits_from_args(args), tuple(args.sandbox_env), hidden_paths(args, evaluator, *others)
    )
    return open_sandbox(args.sandbox, options)


def limits_from_args(args: argparse.Namespace) -> SandboxLimits:
    given = dict(cpu_s=args.sandbox_cpu, memory_mib=args.sandbox_memory, processes=args.sandbox_processes)
    if any(value is not None and value < 0 for value in given.values()):
        raise ValueError("--sandbox-cpu, --sandbox-memory and --sandbox-processes must be >= 0 (0: no limit)")
    return dataclasses.replace(DEFAULTS, **{key: value for key, value in given.items() if value is not None})


def hidden_paths(
    args: argparse.Namespace, evaluator: Callable[..., Any] | None, *others: Any
) -> tuple[str, ...]:
    """What the agent must not see: the project (or its `.tether/` when the agent needs the rest), the
    task files (their answers) and the sources of the evaluator and other reward sources (a ranking
    judge's rubric), and what the user names."""
    needed = [*agent_files(args.agent), *python_environment()]
    if args.agent_cwd:
        needed.append(os.path.abspath(args.agent_cwd))
    project = Project.at(getattr(args, "project_dir", None))
    hide = [str(path) for path in project_hide(project.root, needed)]
    hide += [os.path.abspath(f) for f in (args.tasks, getattr(args, "val_tasks", None)) if f]
    hide += [
        source for part in (evaluator, *others) for source in evaluator_files(part) if source not in needed
    ]
    return tuple([*hide, *(os.path.abspath(os.path.expanduser(p)) for p in args.sandbox_hide)])


def agent_files(template: str) -> list[str]:
    try:
        parts = shlex.split(template)
    except ValueError:  # CommandAgent reports it
        return []
    return [os.path.abspath(part) for part in parts if "{" not in part and os.path.exists(part)]
