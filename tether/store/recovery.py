"""Recovery of rollouts whose worker died: a runner killed with `kill -9` (or with the server it ran in)
leaves its attempts `running` forever. The sweeper finds attempts that stopped heartbeating, marks them
timed out ("heartbeat lost") and requeues their rollout while attempts remain; once at start, so a
restarted server recovers what was running when it died, then periodically."""

from __future__ import annotations

import logging
import threading

from tether.store.base import Store, StoreError

log = logging.getLogger(__name__)

DEFAULT_HEARTBEAT_TIMEOUT_S = 60.0  # the runner heartbeats every 10 s


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
        """One pass: the ids of the rollouts whose stale attempt was closed (requeued or timed out)."""
        try:
            moved = self.store.requeue_stale(self.heartbeat_timeout_s)
        except StoreError as exc:
            log.warning("could not requeue stale rollouts: %s", exc)
            return []
        if moved:
            log.warning("%d rollout(s) lost their worker's heartbeat: %s", len(moved), ", ".join(moved))
            self.recovered.extend(moved)
        return moved

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, daemon=True, name="tether-stale-sweeper")
        self._thread.start()

    def _loop(self) -> None:
        while True:
            self.sweep()
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
