"""`tether train --from-sessions RUN`: the next policy version from a deployed agent's recorded sessions and
the rewards posted for them later (`tether.trainer.sessions` picks the batch). Nothing runs the agent.

The run (`--run`, default `from-RUN`) keeps each version's checkpoint in `checkpoints/vN` and its adapter
in `policies/vN`: running the command again after more sessions were rewarded trains on from the newest
version, or from the one the deployment's canary kept serving when it rolled a newer one back, and writes
the next version, which `tether serve --adapter RUN_DIR/policies/vN` serves and `tether serve --canary
SHARE --watch RUN_DIR/policies` tries on a share of sessions."""

from __future__ import annotations

import datetime as dt
import re
import shutil
import time
from pathlib import Path
from typing import Any

from rich.console import Console

from tether.config.commands import TrainSettings
from tether.contracts import ADVANTAGE_METHODS
from tether.experiment.assembly import open_settings_store
from tether.experiment.errors import SettingsError
from tether.learner.state import CHECKPOINT_EXTRA, CHECKPOINT_POLICY, atomic_dir
from tether.policy_server.base import folder_version
from tether.project import Project
from tether.runner.rewards import RewardError, load_callable
from tether.store.base import NotFound
from tether.trainer.config import FitResult
from tether.trainer.metrics import MetricsLog
from tether.trainer.sessions import SessionSource, session_batch, session_transitions

console = Console(stderr=True)
CHECKPOINTS = "checkpoints"  # vN: each version's checkpoint, its adapter in it
POLICIES = "policies"  # vN: each version's adapter, what a server loads or watches


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
        served = served_version(store, source.run, run_dir)
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
    saved = saved_versions(run_dir)
    base = None if settings.run.fresh else base_version(saved, served)
    if base is not None:
        learner.load_checkpoint(checkpoint_dir(run_dir, base))
        console.print(
            f"training on from v{base}" + (" (the deployment's incumbent)" if base == served else "")
        )
    version = max(saved, default=0) + 1
    log = MetricsLog(run_dir)
    history: list[dict[str, Any]] = []
    for step in range(settings.schedule.steps):
        started = time.monotonic()
        metrics = learner.step(batch).to_dict()
        record = {
            "kind": "train",
            "step": (version - 1) * settings.schedule.steps + step + 1,
            "version": version,
            "base_version": base or 0,
            "samples": len(batch.samples),
            "reward_mean": batch.report.mean_return,
            **report.as_metrics(),
            **{f"train.{key}": value for key, value in metrics.items() if key != "step"},
            "step_seconds": time.monotonic() - started,
        }
        log.write(record)
        history.append(record)
    # The checkpoint first (atomically, with the servable adapter in it), then its copy where a server
    # watches: a kill between the two leaves a version the next run publishes (`publish_versions`).
    extra = {"version": version, "base_version": base or 0, "sessions": report.sessions}
    learner.save_checkpoint(checkpoint_dir(run_dir, version), extra)
    publish_versions(run_dir)
    weights = run_dir / POLICIES / f"v{version}"
    console.print(f"policy v{version} in {weights}: serve it with tether serve --adapter {weights}")
    return FitResult(run_dir, None, None, settings.schedule.steps, history)


def checkpoint_dir(run_dir: Path, version: int) -> Path:
    return run_dir / CHECKPOINTS / f"v{version}"


def saved_versions(run_dir: Path) -> list[int]:
    """The versions this run has checkpoints of."""
    folder = run_dir / CHECKPOINTS
    found = (folder_version(path) for path in folder.iterdir()) if folder.is_dir() else iter(())
    return sorted(
        v for v in found if v is not None and (checkpoint_dir(run_dir, v) / CHECKPOINT_EXTRA).is_file()
    )


def publish_versions(run_dir: Path) -> None:
    """Each checkpointed version's adapter in `policies/vN` (each folder written whole, then renamed)."""
    for version in saved_versions(run_dir):
        target = run_dir / POLICIES / f"v{version}"
        if not target.exists():
            with atomic_dir(target) as tmp:
                shutil.copytree(checkpoint_dir(run_dir, version) / CHECKPOINT_POLICY, tmp, dirs_exist_ok=True)


def base_version(saved: list[int], served: int | None) -> int | None:
    """The version the next trains on from: the deployment's incumbent when it is one of this run's (a
    newer version the canary rolled back is not built on), else this run's newest, else none."""
    if served is not None and served in saved:
        return served
    return max(saved, default=None)


def served_version(store: Any, deployment: str, run_dir: Path) -> int | None:
    """The version of this run that the deployment's canary last left as its incumbent, if any."""
    try:
        recorded = store.get_resource(f"canary:{deployment}")
    except NotFound:
        return None
    incumbent = (recorded.value.get("state") or {}).get("incumbent") or {}
    path = incumbent.get("path")
    if path is None or Path(path).resolve().parent != (run_dir / POLICIES).resolve():
        return None
    return int(incumbent["version"])


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
