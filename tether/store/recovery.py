"""Recovery of rollouts whose worker died: a runner killed with `kill -9` (or with the server it ran in)
leaves its attempts `running`. The sweeper abandons them (`Store.abandon`: timed out, rollout requeued)
so no rollout stays running after its worker died:
- an attempt whose worker runs on this host, in a process that no longer exists, at once (worker ids are
  `host/pid/name`, see `tether.runner.pool.worker_id`);
- any attempt that stopped heartbeating for `heartbeat_timeout_s`.
It sweeps once at start, so a restarted command recovers what was running when it died, then
periodically. Every long-running command (`serve`, `rollout`, `train`, `optimize-prompt`) runs one.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from tether.store.base import InvalidTransition, NotFound, Store, StoreError
from tether.store.records import RolloutStatus

log = logging.getLogger(__name__)

MAX_RUNNING_SCANNED = 100_000


def local_process_gone(worker_id: str) -> bool:
    """True when the worker id names a process on this host that no longer exists."""
    host, _, rest = worker_id.partition("/")
    pid_text, _, _ = rest.partition("/")
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


class StaleSweeper:
    def __init__(self, store: Store, heartbeat_timeout_s: float, interval_s: float | None = None) -> None:
        if heartbeat_timeout_s <= 0:
            raise ValueError(f"the heartbeat timeout must be positive, got {heartbeat_timeout_s}")
        self.store = store
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self.interval_s = interval_s if interval_s is not None else max(heartbeat_timeout_s / 4, 0.05)
        self.recovered: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep(self) -> list[str]:
        """One pass: the ids of the rollouts whose lost attempt was closed (requeued or timed out)."""
        try:
            moved = self._abandon_dead_local_workers() + self.store.requeue_stale(self.heartbeat_timeout_s)
        except StoreError as exc:
            log.warning("could not requeue stale rollouts: %s", exc)
            return []
        if moved:
            log.warning("%d rollout(s) lost their worker: %s", len(moved), ", ".join(moved))
            self.recovered.extend(moved)
        return moved

    def _abandon_dead_local_workers(self) -> list[str]:
        moved = []
        for rollout in self.store.list_rollouts(status=RolloutStatus.running, limit=MAX_RUNNING_SCANNED):
            try:
                attempts = self.store.list_attempts(rollout.id)
                current = next((a for a in attempts if a.number == rollout.attempt_count), None)
                if current is None or current.status != RolloutStatus.running:
                    continue
                if local_process_gone(current.worker_id):
                    reason = f"worker lost: process of {current.worker_id} is gone"
                    self.store.abandon(rollout.id, current.number, reason)
                    moved.append(rollout.id)
            except (InvalidTransition, NotFound):  # a session, or closed meanwhile
                continue
        return moved

    def start(self) -> None:
        """Sweep once now, then every `interval_s` on a background thread."""
        if self._thread is not None:
            return
        self.sweep()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tether-stale-sweeper")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sweep()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
