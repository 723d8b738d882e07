"""A job run every few seconds on a daemon thread until stopped: the servers' sweeps (idle sessions, a
canary's looks, a judge's rounds). An exception in one round is logged and the next round still runs:
a store hiccup must not end the job."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Periodic:
    def __init__(self, name: str, job: Callable[[], Any]) -> None:
        self.name, self.job = name, job
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self, interval_s: float) -> None:
        """Run the job every `interval_s` seconds from now (the first round after one interval)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), daemon=True, name=self.name)
        self._thread.start()

    def _loop(self, interval_s: float) -> None:
        while not self._stop.wait(interval_s):
            try:
                self.job()
            except Exception as exc:  # noqa: BLE001 - logged; the next round runs
                log.warning("%s: %s", self.name, exc)

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
