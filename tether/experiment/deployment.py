"""What `tether serve` runs beside a deployment, from its settings: the canary (`--canary SHARE --watch
DIR`) and the judge of unrated sessions (`--judge-sessions RUBRIC.md`)."""

from __future__ import annotations

from pathlib import Path

from tether.config.commands import ServeSettings
from tether.deploy import CanaryController, CanaryRule, PolicyArm
from tether.deploy.judging import SessionJudge
from tether.experiment.errors import SettingsError
from tether.gateway import Gateway
from tether.policy_server import PolicyServer
from tether.policy_server.base import ServesSeveralPolicies, folder_version
from tether.rewards.judge import Judge
from tether.rewards.sources import RewardOptions, reward_source
from tether.runner.rewards import RewardError
from tether.store import Store


def canary_of(
    settings: ServeSettings, store: Store, gateway: Gateway, server: PolicyServer
) -> CanaryController | None:
    """The canary `settings` ask for, restored to what its last decision left served; None without one."""
    chosen = settings.canary
    if chosen.canary is None:
        if chosen.watch is not None:
            raise SettingsError("tether serve: --watch is the --canary's folder: give --canary SHARE too")
        return None
    if chosen.watch is None:
        raise SettingsError(
            "tether serve: --canary needs --watch DIR, the folder where new versions appear "
            "(a `tether train --from-sessions` run's policies/)"
        )
    if not isinstance(server, ServesSeveralPolicies):
        raise SettingsError(
            "tether serve: --canary serves two adapters side by side in the built-in engine: drop "
            "--upstream/--engine vllm"
        )
    rule = CanaryRule(
        chosen.canary, chosen.canary_min_sessions, chosen.canary_max_sessions, chosen.canary_margin
    )
    if chosen.canary_interval <= 0:
        raise SettingsError("tether serve: --canary-interval must be positive")
    adapter = settings.gateway.adapter
    incumbent = PolicyArm(0)
    if adapter is not None:
        incumbent = PolicyArm(folder_version(Path(adapter)) or server.policy_version or 1, adapter)
    try:
        controller = CanaryController(
            store, gateway, server, settings.gateway.sessions_run, Path(chosen.watch), rule, incumbent
        )
    except ValueError as exc:
        raise SettingsError(f"tether serve: {exc}") from None
    try:
        controller.restore()
    except ValueError as exc:
        raise SettingsError(f"tether serve: {exc}") from None
    return controller


def session_judge_of(settings: ServeSettings, store: Store, judge_key: str | None) -> SessionJudge | None:
    """The judge of unrated sessions `settings` ask for; None without one."""
    chosen = settings.judge
    if chosen.judge_sessions is None:
        return None
    if chosen.judge_after < 0 or chosen.judge_interval <= 0:
        raise SettingsError("tether serve: --judge-after must be >= 0 and --judge-interval positive")
    if not chosen.judge_url:
        raise SettingsError(
            "tether serve: --judge-sessions needs --judge-url URL, the judge's OpenAI-compatible /v1"
        )
    options = RewardOptions(
        judge_url=chosen.judge_url, judge_model=chosen.judge_model, judge_key=judge_key or "none"
    )
    try:
        judge = reward_source(f"judge:{chosen.judge_sessions}", options)
    except RewardError as exc:
        raise SettingsError(f"tether serve: --judge-sessions: {exc}") from None
    assert isinstance(judge, Judge)
    return SessionJudge(store, settings.gateway.sessions_run, judge, chosen.judge_after)
