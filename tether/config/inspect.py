"""The settings of `tether store`'s actions: listing rollouts, comparing two rewards, migrating a store."""

from __future__ import annotations

from dataclasses import dataclass, field

from tether.config.option import option
from tether.config.rewards import RewardSettings
from tether.config.run import StoreSettings
from tether.config.search import rollout_statuses


@dataclass
class ListSettings:
    """Which rollouts `tether store rollouts` lists."""

    run: str | None = option(None, "only this run's rollouts", metavar="NAME")
    status: str | None = option(None, "only rollouts with this status", choices=rollout_statuses)
    limit: int = option(50, "at most this many (0: all)")
    json: bool = option(
        False, "one JSON object per line: id, run, task_id, sample, status, attempts, reward (for scripts)"
    )


@dataclass
class AgreementSettings:
    """Which two rewards `tether store agreement` compares, on which rollouts."""

    run: str | None = option(None, "the run whose rollouts are compared", metavar="NAME", required=True)
    rewards: str | None = option(
        None, "the two reward names, e.g. judge,correct", metavar="FIRST,SECOND", required=True
    )
    mode: str = option("val", "which rollouts (default: held-out)", choices=("val", "train", "all"))
    threshold: float = option(0.5, "a reward at least this passes (0.5)")
    json: bool = option(False, "print the figures as one JSON object")


@dataclass
class MigrateSettings:
    """Which store `tether store migrate` copies into which."""

    source: str | None = option(
        None, "the store to copy (default: --store)", flags=("--from",), metavar="URL"
    )
    target: str | None = option(None, "the store to copy into", flags=("--to",), metavar="URL", required=True)
    force: bool = option(False, "add to a target that already has records")


@dataclass
class StoreReadSettings:
    """`tether store`: the store it reads."""

    store: StoreSettings = field(default_factory=StoreSettings)


@dataclass
class ListRolloutsSettings:
    """`tether store rollouts`."""

    rollouts: ListSettings = field(default_factory=ListSettings)


@dataclass
class RewardAgreementSettings:
    """`tether store agreement`."""

    agreement: AgreementSettings = field(default_factory=AgreementSettings)


@dataclass
class StoreMigrationSettings:
    """`tether store migrate`."""

    migrate: MigrateSettings = field(default_factory=MigrateSettings)


@dataclass
class EvalSettings:
    """Which run's stored validations `tether eval` re-scores, against which tasks."""

    run: str | None = option(
        None, "the run whose held-out rollouts are scored", metavar="NAME", required=True
    )
    tasks: str | None = option(
        None,
        "the held-out task file the run validated on: its tasks' references are what --reward reads",
        flags=("--tasks",),
        metavar="FILE",
        required=True,
    )
    pass_reward: float = option(1.0, "a rollout passes (pass@1, pass@K) when its reward is at least this")
    json: bool = option(False, "print the figures as JSON lines, one per validation")


@dataclass
class EvaluateSettings:
    """`tether eval`."""

    eval: EvalSettings = field(default_factory=EvalSettings)
    rewards: RewardSettings = field(default_factory=RewardSettings)
    store: StoreSettings = field(default_factory=StoreSettings)
