"""Admission control: pause new model calls (e.g. for a weight update), drain in-flight ones, resume.

A call that arrives while admission is paused waits for it to resume, so the agent sees latency, not
an error; only past the hold limit does it get a retryable 429 with Retry-After.
"""

from __future__ import annotations

import asyncio

from tether.gateway.errors import GatewayError


class Admission:
    def __init__(self, hold_limit_s: float = 300.0) -> None:
        self.hold_limit_s = hold_limit_s
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.in_flight = 0
        self.waiting = 0

    @property
    def paused(self) -> bool:
        return not self._open.is_set()

    def pause(self) -> None:
        self._open.clear()

    def resume(self) -> None:
        self._open.set()

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until no call is in flight. Returns False if the timeout passed first."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def acquire(self) -> None:
        """Count a call as in flight, after waiting (up to the hold limit) while admission is paused."""
        if not self._open.is_set():
            self.waiting += 1
            try:
                await asyncio.wait_for(self._open.wait(), self.hold_limit_s)
            except TimeoutError:
                raise GatewayError(
                    429,
                    "model calls are paused for a policy update; retry shortly",
                    type="rate_limit_error",
                    code="paused",
                    headers={"Retry-After": "5"},
                ) from None
            finally:
                self.waiting -= 1
        self.in_flight += 1
        self._idle.clear()

    def release(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._idle.set()
