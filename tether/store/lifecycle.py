"""The rollout lifecycle as plain code, the same for every store backend.

    queued --claim--> running --close(succeeded | cancelled)--> finished
                         |  --close(failed | timed_out), attempts left--> queued (a new attempt later)
                         |  --close(failed | timed_out), none left--> finished
                         |  --abandon (the worker is gone)--> queued, while MAX_WORKER_LOSSES allow

A backend reads the rollout inside its write transaction, asks `close_attempt` or `abandon_attempt` what
to do, and writes the `Closing` it gets back. The rules:
- Only a running rollout can be closed, and only to a finished status (queued/running come from
  enqueue and claim).
- A stale attempt (a worker that lost its heartbeat and was replaced) cannot close the attempt that
  replaced it: closing names the attempt, and only the current one is accepted.
- A failed or timed-out attempt requeues the rollout while it has attempts left.
- An attempt whose worker died (a lost heartbeat, a killed process) is the runner's failure, not the
  agent's: it requeues the rollout without using up an attempt, at most MAX_WORKER_LOSSES times.
- Sessions (rollouts opened by hand with `start_session`) have no worker to heartbeat them, so they are
  never stale.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.contracts import Meta
from tether.store.base import InvalidTransition
from tether.store.records import FINISHED_STATUSES, Rollout, RolloutStatus

MAX_WORKER_LOSSES = 3
RETRYABLE = frozenset({RolloutStatus.failed, RolloutStatus.timed_out})


@dataclass(frozen=True)
class Closing:
    """What closing an attempt writes: the attempt's end and the rollout's next status."""

    attempt: int  # 0 when the rollout never had an attempt (cancelled while queued)
    attempt_status: RolloutStatus
    rollout_status: RolloutStatus  # queued when it is retried
    worker_losses: int  # the rollout's count after this closing

    @property
    def requeued(self) -> bool:
        return self.rollout_status == RolloutStatus.queued


def is_session(rollout: Rollout) -> bool:
    return bool(rollout.metadata.get(Meta.SESSION))


def close_attempt(rollout: Rollout, status: RolloutStatus, attempt: int | None) -> Closing:
    """Close the rollout's current attempt (or, with `attempt` None, whatever it is doing) with `status`."""
    status = RolloutStatus(status)
    if rollout.status in FINISHED_STATUSES:
        raise InvalidTransition(f"rollout {rollout.id} is already {rollout.status.value}")
    if status not in FINISHED_STATUSES:
        raise InvalidTransition(f"cannot set status {status.value}; use enqueue/claim")
    _check_current(rollout, attempt)
    retry = (
        status in RETRYABLE
        and rollout.status == RolloutStatus.running
        and rollout.attempt_count < rollout.max_attempts + rollout.worker_losses
    )
    return Closing(
        attempt=attempt or rollout.attempt_count,
        attempt_status=status,
        rollout_status=RolloutStatus.queued if retry else status,
        worker_losses=rollout.worker_losses,
    )


def abandon_attempt(rollout: Rollout, attempt: int) -> Closing:
    """The worker running `attempt` is gone: time the attempt out and give the rollout another try,
    without using up one of its attempts while the loss allowance lasts."""
    if rollout.status in FINISHED_STATUSES:
        raise InvalidTransition(f"rollout {rollout.id} is already {rollout.status.value}")
    if is_session(rollout):
        raise InvalidTransition(f"rollout {rollout.id} is a session: no worker runs it")
    _check_current(rollout, attempt)
    losses = rollout.worker_losses + (1 if rollout.worker_losses < MAX_WORKER_LOSSES else 0)
    retry = rollout.attempt_count < rollout.max_attempts + losses
    return Closing(
        attempt=attempt,
        attempt_status=RolloutStatus.timed_out,
        rollout_status=RolloutStatus.queued if retry else RolloutStatus.timed_out,
        worker_losses=losses,
    )


def _check_current(rollout: Rollout, attempt: int | None) -> None:
    if attempt is None:
        return
    if rollout.status != RolloutStatus.running or attempt != rollout.attempt_count:
        # A stale worker (one that lost its heartbeat) must not finish the attempt that replaced it.
        raise InvalidTransition(
            f"attempt {attempt} of rollout {rollout.id} is not running "
            f"(rollout is {rollout.status.value}, latest attempt {rollout.attempt_count})"
        )
