"""What every command that runs agents reads first, from its settings: the tasks, the rewards, the agent
(its sandbox and warm starts) and the runner's settings. Everything that can be wrong with the user's
files is found here, before anything runs."""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.text import Text

from tether.config.agent import AGENT_REWARDS, AgentSettings, QuotaSettings
from tether.config.commands import RunsAgents, TrainSettings
from tether.contracts import TASK_REFERENCE, has_reference
from tether.experiment.errors import SettingsError
from tether.experiment.rewards import rewards_of
from tether.experiment.sandbox import sandbox_of
from tether.limits import MIB, AgentQuota
from tether.runner import AIRRules, CommandAgent, RewardError, RunnerConfig, TaskFileError, load_tasks
from tether.runner.agents import refuse_missing_script
from tether.runner.rewards import Evaluator, check_reference_reader
from tether.runner.warm import WarmStarts
from tether.store import Task

console = Console(stderr=True)


def load_inputs(
    settings: RunsAgents, judge_key: str | None
) -> tuple[list[Task], Evaluator | None, CommandAgent]:
    """The tasks, the evaluator and the agent the settings name, each checked (SettingsError if bad)."""
    command, task_file = settings.agent.command, settings.tasks.file
    if command is None or task_file is None:
        raise SettingsError("tether: set agent.command (--agent) and tasks.file (--tasks)")
    try:
        tasks = load_tasks(task_file)
        evaluator, group_scorer = rewards_of(
            settings.rewards, judge_key, rank_groups=isinstance(settings, TrainSettings)
        )
        if group_scorer is None:  # else the group's judge reads the whole task
            check_reference_reader(evaluator, tasks)
        sandbox = sandbox_of(settings, evaluator, group_scorer)
        warn_if_the_agent_user_reads(settings, task_file, tasks)
        agent = CommandAgent(
            command,
            cwd=settings.agent.cwd,
            user=settings.agent.user,
            sandbox=sandbox,
            warm=warm_starts(settings.agent),
        )
        if settings.runner.runner == "local":
            refuse_missing_script(agent)
        for task in tasks:
            agent.argv(task.input)
    except (TaskFileError, RewardError, ValueError) as exc:
        raise SettingsError(f"tether: {exc}") from None
    return tasks, evaluator, agent


def runner_config(agent: AgentSettings, primary_reward: str | None) -> RunnerConfig:
    if agent.n_workers is None or agent.n_workers < 1 or agent.max_attempts < 1 or agent.timeout <= 0:
        raise SettingsError("--n-workers and --max-attempts must be at least 1, --timeout positive")
    return RunnerConfig(
        n_workers=agent.n_workers,
        timeout_s=agent.timeout,
        primary_reward=primary_reward,
        agent_rewards=AGENT_REWARDS[agent.agent_rewards],
        air=AIRRules.off() if agent.no_air else AIRRules(),
    )


def warn_if_the_agent_user_reads(settings: RunsAgents, path: str, tasks: Sequence[Task]) -> None:
    """With --agent-user and no sandbox, a task file that holds references and that user can read hands
    every agent every answer: its path is on Tether's command line (docs/security.md). Say so, once."""
    agent_user = settings.agent.user
    if (
        agent_user is None
        or settings.sandbox.kind != "none"
        or not any(has_reference(t.input) for t in tasks)
    ):
        return
    try:
        user = pwd.getpwnam(agent_user)
    except KeyError:
        return  # CommandAgent refuses the user, naming it
    if readable_by(path, user.pw_uid, user.pw_gid):
        console.print(
            Text.assemble(
                ("warning:", "yellow"),
                f" {path} holds tasks with a {TASK_REFERENCE!r} and --agent-user {agent_user} can read "
                f"it, so every agent can read every answer: chmod o-r {path} (and g-r, where that user's "
                "group owns it), or add --sandbox bwrap, which hides it",
            )
        )


def readable_by(path: str, uid: int, gid: int) -> bool:
    """Whether a process of `uid` and primary group `gid` and no other group (as --agent-user runs
    agents) can read the file at `path`: read permission on it, search permission on each folder above."""
    real = Path(os.path.realpath(path))
    try:
        checks = [(real, stat.S_IRUSR)] + [(folder, stat.S_IXUSR) for folder in real.parents]
        for item, owner_bit in checks:
            st = item.stat()
            shift = 0 if st.st_uid == uid else 3 if st.st_gid == gid else 6
            if not st.st_mode & (owner_bit >> shift):
                return False
    except OSError:
        return False
    return True


def warm_starts(agent: AgentSettings) -> WarmStarts | None:
    """Warm starts unless `--agent-cold`."""
    if agent.cold and agent.warm:
        raise ValueError("--agent-cold and --agent-warm contradict each other: keep one")
    if agent.cold and agent.preload is not None:
        raise ValueError("--agent-preload needs warm starts: drop --agent-cold")
    if agent.cold:
        return None
    preload = agent.preload
    return WarmStarts(None if preload is None else [m.strip() for m in preload.split(",") if m.strip()])


def agent_quota(quota: QuotaSettings) -> AgentQuota:
    """What one agent may send with its rollout token: one request's body, its attempt's spans."""
    return AgentQuota(
        max_request_bytes=int(quota.max_request_mb * MIB),
        max_spans=quota.max_spans_per_attempt,
        max_span_bytes=int(quota.max_span_mb_per_attempt * MIB),
    )


def request_caps(max_tokens_cap: int, n_cap: int, command: str) -> tuple[int, int]:
    """The tokens and the choices one model call may ask for (`--max-tokens-cap`, `--n-cap`)."""
    if max_tokens_cap < 1 or n_cap < 1:
        raise SettingsError(f"tether {command}: --max-tokens-cap and --n-cap must be at least 1")
    return max_tokens_cap, n_cap
