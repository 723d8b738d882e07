"""`tether train --from-sessions RUN`: the next policy version from a deployed agent's recorded sessions and
the rewards posted for them later (`tether.trainer.sessions` picks the batch). Nothing runs the agent.

The run (`--run`, default `from-RUN`) keeps its versions in `policies/vN` and a checkpoint: running the
command again after more sessions were rewarded resumes from that checkpoint and writes the next
version, which `tether serve --adapter RUN_DIR/policies/vN` serves."""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from tether.config.commands import TrainSettings
from tether.contracts import ADVANTAGE_METHODS
from tether.experiment.assembly import open_settings_store
from tether.experiment.errors import SettingsError
from tether.project import Project
from tether.runner.rewards import RewardError, load_callable
from tether.trainer.config import FitResult
from tether.trainer.metrics import MetricsLog
from tether.trainer.sessions import SessionSource, session_batch, session_transitions

console = Console(stderr=True)
CHECKPOINT = "checkpoint"


def fit_from_sessions(settings: TrainSettings) -> FitResult:
    """Train the next policy version on the sessions of `settings.sessions.from_sessions`."""
    from tether.experiment.train import learner_config
    from tether.learner.base import open_learner

    source = session_source(settings)
    algorithm = settings.learner.algorithm
    if algorithm != "sft" and algorithm not in ADVANTAGE_METHODS:
        raise SettingsError(f"tether train --from-sessions: --algorithm {algorithm} needs a rollout's group")
    project = Project.at(settings.store.project_dir)
    run_dir = project.state_dir / "runs" / (settings.run.name or f"from-{source.run}")
    store = open_settings_store(settings.store, "train")
    try:
        transitions, report = session_transitions(store, source)
    finally:
        store.close()
    threshold = settings.imitation.sft_min_reward
    batch = session_batch(transitions, algorithm, threshold)
    console.print(
        f"{report.finished} finished sessions in run {source.run}: {report.unrewarded} without a reward, "
        f"{report.redacted} redacted, {report.left_by_hook} left out by the hook, {report.stale_calls} "
        f"stale calls; {len(batch.samples)} samples from {len(report.sessions)} sessions"
    )
    if not batch.samples:
        wanted = "rewards that differ" if algorithm != "sft" else f"a reward of at least {threshold}"
        raise SettingsError(
            f"tether train --from-sessions {source.run}: nothing to train on: no finished sessions with "
            f"{wanted} (POST /sessions/NAME/rewards with the reward key: docs/guides/deployment.md)"
        )
    learner = open_learner("local", learner_config(settings))
    version = _resumed(learner, run_dir / CHECKPOINT, settings.run.fresh)
    log = MetricsLog(run_dir)
    history: list[dict[str, Any]] = []
    for step in range(settings.schedule.steps):
        started = time.monotonic()
        metrics = learner.step(batch).to_dict()
        record = {
            "kind": "train",
            "step": version + step + 1,
            "samples": len(batch.samples),
            "reward_mean": batch.report.mean_return,
            **report.as_metrics(),
            **{f"train.{key}": value for key, value in metrics.items() if key != "step"},
            "step_seconds": time.monotonic() - started,
        }
        log.write(record)
        history.append(record)
    version += 1
    weights = learner.save_weights(run_dir / "policies" / f"v{version}", version)
    learner.save_checkpoint(run_dir / CHECKPOINT, {"version": version, "sessions": report.sessions})
    console.print(f"policy v{version} in {weights.path}: serve it with tether serve --adapter {weights.path}")
    return FitResult(run_dir, None, None, settings.schedule.steps, history)


def session_source(settings: TrainSettings) -> SessionSource:
    chosen = settings.sessions
    assert chosen.from_sessions is not None
    if chosen.session_version_lag < 0:
        raise SettingsError("tether train: --session-version-lag must be >= 0")
    for pattern in chosen.redact:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SettingsError(
                f"tether train: --redact {pattern!r} is not a regular expression: {exc}"
            ) from None
    keep = None
    if chosen.redact_hook:
        try:
            keep = load_callable(chosen.redact_hook)
        except RewardError as exc:
            raise SettingsError(f"tether train: --redact-hook: {exc}") from None
    return SessionSource(
        run=chosen.from_sessions,
        since=parse_time(chosen.since),
        version_lag=chosen.session_version_lag,
        redact=tuple(chosen.redact),
        keep=keep,
    )


def parse_time(text: str | None) -> float | None:
    """Seconds since the epoch, from seconds or an ISO 8601 date or time (UTC unless it says)."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text)
    except ValueError:
        raise SettingsError(
            f"tether train: --since {text!r}: give seconds since the epoch or an ISO date (2026-12-01T09:30)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def _resumed(learner: Any, checkpoint: Path, fresh: bool) -> int:
    """The last version this run wrote (its checkpoint restored), or 0 for a new run."""
    if fresh or not checkpoint.exists():
        return 0
    extra = learner.load_checkpoint(checkpoint)
    return int(extra.get("version", 0))
