"""The sandbox settings of every command that launches agents (rollout, train, optimize-prompt), turned
into the `Sandbox` that `CommandAgent` takes."""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tether.config.agent import SandboxSettings
from tether.config.commands import OptimizePromptSettings, RunsAgents, TrainSettings
from tether.project import Project
from tether.rewards import evaluator_files
from tether.runner.agents import PRIVATE_VARIABLES, agent_identity, default_identity
from tether.runner.sandbox import (
    BwrapSandbox,
    Sandbox,
    SandboxError,
    SandboxLimits,
    SandboxOptions,
    open_sandbox,
    project_hide,
)
from tether.store.backends import StoreURLError, scheme_of, sqlite_path

log = logging.getLogger(__name__)
AUTO = "auto"
DEFAULTS = SandboxLimits()
# The settings that only mean something with a sandbox: flag, and field of the sandbox settings.
SANDBOX_ONLY = {
    "--sandbox-env": "env",
    "--sandbox-hide": "hide",
    "--sandbox-show": "show",
    "--sandbox-cpu": "cpu",
    "--sandbox-memory": "memory",
    "--sandbox-processes": "processes",
    "--sandbox-scratch": "scratch",
}


def sandbox_of(settings: RunsAgents, evaluator: Callable[..., Any] | None, *others: Any) -> Sandbox | None:
    """The sandbox the options ask for (None: none), checked when it is the default's (`auto`: bwrap for
    agents launched here, wherever it can run; none where they run elsewhere, a Job's pod or a Ray
    worker). Raises ValueError naming what is wrong. `settings.sandbox.kind` is left as the kind chosen."""
    chosen = settings.sandbox
    here = settings.runner.runner == "local" and not settings.ray.ray
    auto = chosen.kind == AUTO
    if auto:
        chosen.kind = "bwrap" if here else "none"
    given = [flag for flag, field in SANDBOX_ONLY.items() if getattr(chosen, field)]
    if chosen.kind == "none":
        if given:
            raise ValueError(f"{given[0]} is an option of the sandbox, which --sandbox none turns off")
        return None
    if not here:
        raise ValueError(
            f"--sandbox {chosen.kind} confines agents launched on this machine: with --runner k8s the "
            "Job's pod is the boundary (docs/security.md), and --ray does not take a sandbox yet"
        )
    private = sorted(set(chosen.env) & PRIVATE_VARIABLES)
    if private:
        raise ValueError(f"--sandbox-env {private[0]}: Tether's own settings and secrets never reach agents")
    shown = tuple(os.path.abspath(os.path.expanduser(p)) for p in chosen.show)
    missing = [path for path in shown if not os.path.exists(path)]
    if missing:
        raise ValueError(f"--sandbox-show {missing[0]}: no such file or directory")
    options = SandboxOptions(
        limits_of(chosen), tuple(chosen.env), hidden_paths(settings, evaluator, *others), show=shown
    )
    sandbox = open_sandbox(chosen.kind, options)
    if auto and not _runs_here(sandbox, settings.agent.user, given):
        chosen.kind = "none"
        return None
    return sandbox


def _runs_here(sandbox: Sandbox, agent_user: str | None, given: list[str]) -> bool:
    """Whether the default's sandbox can run here (checked once: the agent's check finds it ready), or
    one line saying why not; sandbox options it cannot honour are refused. As root, where bwrap cannot
    run as `nobody`, agents keep uid 0 in it, and one line says so."""
    identity = agent_identity(agent_user) if agent_user else default_identity(sandbox)
    try:
        sandbox.check(identity)
    except SandboxError as exc:
        if not agent_user and identity and _runs_as_root(sandbox):
            log.warning("agents run in the sandbox as uid 0 (root's, without capabilities): %s", exc)
            return True
        if given:
            raise ValueError(f"{given[0]} needs the sandbox, which cannot run here: {exc}") from None
        log.warning(
            "agents run WITHOUT a sandbox (they can read and write what Tether can): %s; "
            "--sandbox none says so on purpose",
            exc,
        )
        return False
    return True


def _runs_as_root(sandbox: Sandbox) -> bool:
    """Whether bwrap runs for Tether's own user, root: then agents keep it (`--agent-user root`)."""
    if not isinstance(sandbox, BwrapSandbox):
        return False
    try:
        sandbox.check({})
    except SandboxError:
        return False
    sandbox.as_root = True
    return True


def limits_of(sandbox: SandboxSettings) -> SandboxLimits:
    given = dict(
        cpu_s=sandbox.cpu,
        memory_mib=sandbox.memory,
        processes=sandbox.processes,
        scratch_mib=sandbox.scratch,
    )
    if any(value is not None and value < 0 for value in given.values()):
        raise ValueError(
            "--sandbox-cpu, --sandbox-memory, --sandbox-processes and --sandbox-scratch must be >= 0 "
            "(0: no limit)"
        )
    return dataclasses.replace(DEFAULTS, **{key: value for key, value in given.items() if value is not None})


def hidden_paths(settings: RunsAgents, evaluator: Callable[..., Any] | None, *others: Any) -> tuple[str, ...]:
    """What the agent must not see, wherever it falls inside what it is shown: the project's `.tether/`
    and `.git/`, the store's files, the task files (their answers), the evaluator's and other reward
    sources' folders (their data files; only their own files when the agent's code shares the
    folder), and what the user names."""
    project = Project.at(settings.store.project_dir)
    hide = [str(path) for path in project_hide(project.root)]
    hide += store_files(settings.store.url, project.root)
    hide += [os.path.abspath(f) for f in (settings.tasks.file, val_tasks_file(settings)) if f]
    hide += scorer_paths([evaluator, *others], agent_files(settings.agent.command or ""))
    return tuple([*hide, *(os.path.abspath(os.path.expanduser(p)) for p in settings.sandbox.hide)])


def val_tasks_file(settings: RunsAgents) -> str | None:
    """The held-out task file, for the commands that have one."""
    if isinstance(settings, TrainSettings):
        return settings.validation.tasks
    if isinstance(settings, OptimizePromptSettings):
        return settings.tasks.val_tasks
    return None


def store_files(url: str | None, project_root: Path) -> list[str]:
    """A SQLite store's file and its `-wal`, `-shm` and `-journal` beside it."""
    if url is None or scheme_of(url) != "sqlite":
        return []
    try:
        path = os.path.abspath(sqlite_path(url, project_root))
    except StoreURLError:
        return []
    return [path, *(path + suffix for suffix in ("-wal", "-shm", "-journal"))]


def scorer_paths(scorers: Sequence[Any], agent: Sequence[str]) -> list[str]:
    """The folders the scorers' code lives in, or only their files where the agent's own code lives in
    that folder too, or below it (an evaluator at a project's top, the agent in a folder of its own)."""
    folders = [os.path.realpath(os.path.dirname(path)) for path in agent]
    hide: list[str] = []
    for part in scorers:
        for source in evaluator_files(part):
            if source in agent:
                continue
            folder = os.path.realpath(os.path.dirname(os.path.abspath(source)))
            holds_agent = any(mine == folder or mine.startswith(folder + os.sep) for mine in folders)
            hide.append(source if holds_agent else os.path.dirname(os.path.abspath(source)))
    return hide


def agent_files(template: str) -> list[str]:
    try:
        parts = shlex.split(template)
    except ValueError:  # CommandAgent reports it
        return []
    return [os.path.abspath(part) for part in parts if "{" not in part and os.path.exists(part)]
