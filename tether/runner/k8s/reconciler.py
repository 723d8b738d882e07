"""The reconciler: creates a run's Jobs (no faster than the rate limit) and learns how each one ended from
a watch on the run's Jobs plus a periodic list, which also notices Jobs that vanished.

Kubernetes is only asked how a Job ended; the agent's calls and rewards reach the gateway directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from http import HTTPStatus
from typing import Any

from kubernetes.client.rest import ApiException

from tether.runner.k8s.api import Kube, api_error, is_retryable
from tether.runner.k8s.manifest import run_selector

log = logging.getLogger(__name__)
WATCH_TIMEOUT_S = 60
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0


class Ending(Enum):
    complete = "complete"
    failed = "failed"
    timed_out = "timed_out"
    vanished = "vanished"


@dataclass(frozen=True)
class JobEnd:
    ending: Ending
    reason: str = ""


class JobRefused(Exception):
    """The API server refused the Job for good (e.g. 422: invalid): the attempt fails, nothing retries it."""


def job_end(job: Any) -> JobEnd | None:
    """How a Job ended, from its conditions; None while it runs."""
    for condition in (job.status.conditions if job.status else None) or []:
        if condition.status != "True":
            continue
        if condition.type == "Complete":
            return JobEnd(Ending.complete)
        if condition.type == "Failed":
            reason = condition.reason or "Failed"
            detail = f"{reason}: {condition.message}" if condition.message else reason
            return JobEnd(Ending.timed_out if reason == "DeadlineExceeded" else Ending.failed, detail)
    return None


class RateLimiter:
    """At most `per_minute` starts a minute, evenly spaced. The next slot is counted from when the
    previous call returned, so the API server never sees two creations closer than the interval."""

    def __init__(self, per_minute: float) -> None:
        self.interval_s = 60.0 / per_minute
        self._lock = asyncio.Lock()
        self._next = 0.0

    async def run(self, call: Callable[[], Any]) -> Any:
        async with self._lock:
            wait = self._next - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                return await asyncio.to_thread(call)
            finally:
                self._next = time.monotonic() + self.interval_s


@dataclass
class _Pending:
    future: asyncio.Future[JobEnd]
    created_at: float


class Reconciler:
    def __init__(self, kube: Kube, run: str | None, per_minute: float, resync_s: float) -> None:
        self.kube = kube
        self.selector = run_selector(run)
        self.limiter = RateLimiter(per_minute)
        self.resync_s = resync_s
        self._pending: dict[str, _Pending] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._resync: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._resync is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._stopping.clear()
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="tether-k8s-watch")
        self._watcher.start()
        self._resync = asyncio.create_task(self._resync_loop(), name="tether-k8s-resync")

    async def stop(self) -> None:
        """Stops watching, and deletes the run's Jobs that are still pending and every Secret of the run."""
        self._stopping.set()
        if self._resync is not None:
            self._resync.cancel()
            await asyncio.gather(self._resync, return_exceptions=True)
            self._resync = None
        names = list(self._pending)
        self._pending.clear()
        await asyncio.gather(*(self._delete_quietly(self.kube.delete_job, n) for n in names))
        with contextlib.suppress(Exception):
            secrets = await asyncio.to_thread(self.kube.list_secrets, self.selector)
            await asyncio.gather(
                *(self._delete_quietly(self.kube.delete_secret, s.metadata.name) for s in secrets)
            )

    def failure(self) -> str | None:
        if self._resync is not None and self._resync.done() and not self._resync.cancelled():
            return f"the Kubernetes reconciler stopped: {self._resync.exception()}"
        return None

    # -- creating and waiting -------------------------------------------------------------------------

    async def create(self, job: dict[str, Any], deadline: float) -> Any:
        """Creates the Job (rate-limited); retries what may pass later until `deadline` (monotonic).
        Raises JobRefused when the server refuses it for good."""
        name = job["metadata"]["name"]
        loop = asyncio.get_running_loop()
        self._pending[name] = _Pending(loop.create_future(), float("inf"))
        created = await self.retrying(
            lambda: self.limiter.run(lambda: self.kube.create_job(job)), deadline, f"create Job {name}"
        )
        self._pending[name].created_at = time.monotonic()
        return created

    async def retrying(self, call: Callable[[], Any], deadline: float, what: str) -> Any:
        """Awaits `call()`, again after a backoff while its errors are retryable and time is left."""
        delay = BACKOFF_FIRST_S
        while True:
            try:
                return await call()
            except ApiException as exc:
                if not is_retryable(exc):
                    raise JobRefused(f"Kubernetes refused to {what}: {api_error(exc)}") from None
                error = api_error(exc)
            except Exception as exc:
                if not is_retryable(exc):
                    raise
                error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() + delay > deadline:
                raise JobRefused(f"could not {what} in time: {error}")
            log.warning("could not %s (%s); retrying in %.1fs", what, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)

    async def wait(self, name: str, timeout_s: float) -> JobEnd | None:
        """How the Job ended, or None if it did not end within `timeout_s`."""
        pending = self._pending.get(name)
        if pending is None:
            return JobEnd(Ending.vanished, "not created")
        try:
            return await asyncio.wait_for(asyncio.shield(pending.future), timeout_s)
        except TimeoutError:
            return None

    async def forget(self, name: str, delete: bool) -> None:
        """The attempt is over: stop tracking its Job, deleting it when it must not run on."""
        self._pending.pop(name, None)
        if delete:
            await self._delete_quietly(self.kube.delete_job, name)

    async def _delete_quietly(self, delete: Callable[[str], None], name: str) -> None:
        try:
            await asyncio.to_thread(delete, name)
        except Exception as exc:  # the TTL and owner references clean up what this misses
            log.warning("could not delete %s: %s", name, exc)

    # -- learning how Jobs ended ----------------------------------------------------------------------

    def _observe(self, job: Any, deleted: bool = False) -> None:
        pending = self._pending.get(job.metadata.name)
        if pending is None or pending.future.done():
            return
        end = job_end(job)
        if end is None and deleted:
            end = JobEnd(Ending.vanished, "the Job was deleted before it finished")
        if end is not None:
            pending.future.set_result(end)

    def _vanished(self, present: set[str], listed_at: float) -> None:
        for name, pending in self._pending.items():
            if name not in present and pending.created_at < listed_at and not pending.future.done():
                pending.future.set_result(JobEnd(Ending.vanished, "the Job no longer exists"))

    async def _resync_loop(self) -> None:
        while True:
            await asyncio.sleep(self.resync_s)
            listed_at = time.monotonic()
            try:
                jobs, _ = await asyncio.to_thread(self.kube.list_jobs, self.selector)
            except Exception as exc:  # the next pass tries again; the watch may still be working
                log.warning("listing the run's Jobs failed: %s", exc)
                continue
            for job in jobs:
                self._observe(job)
            self._vanished({job.metadata.name for job in jobs}, listed_at)

    def _watch(self) -> None:
        """The watch thread: lists, then follows events from that resourceVersion. The watch ends at
        its timeout, or with a 410 Gone when its resourceVersion expired (the API server compacted past
        it): either way the next pass relists, so what changed meanwhile is seen, and watches from the
        list's version, at once after a first 410. Other errors, and a 410 again, relist after a backoff."""
        delay = BACKOFF_FIRST_S
        expired_last = False
        while not self._stopping.is_set():
            try:
                jobs, version = self.kube.list_jobs(self.selector)
                for job in jobs:
                    self._post(job, False)
                for event in self.kube.watch_jobs(self.selector, version, WATCH_TIMEOUT_S):
                    if self._stopping.is_set():
                        return
                    if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                        self._post(event["object"], event["type"] == "DELETED")
                delay = BACKOFF_FIRST_S
                expired_last = False
            except Exception as exc:  # an API error, or a dropped connection: relist after a backoff
                if self._stopping.is_set():
                    return
                api = exc if isinstance(exc, ApiException) else None
                if api is not None and api.status == HTTPStatus.GONE and not expired_last:  # relist now
                    log.info("the watch's resourceVersion expired (%s); relisting", api_error(api))
                    expired_last = True
                    continue
                if api is not None:
                    expired_last = api.status == HTTPStatus.GONE
                log.info("watching the run's Jobs: %s; relisting", exc if api is None else api_error(api))
                self._stopping.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)

    def _post(self, job: Any, deleted: bool) -> None:
        if self._loop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._observe, job, deleted)
