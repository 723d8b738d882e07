"""Fair admission across owners (the gateway passes the rollout id), so that one rollout's long requests
cannot hold another's up for longer than one scheduling step:

- Each owner's requests wait in a FIFO queue of their own and are admitted in the order they arrived.
- A free slot (the batch holds fewer than `max_batch_size` rows) goes to the waiting owner with the
  fewest running rows; ties go to the owner whose oldest waiting request arrived first.
- An owner with nothing running is admitted at the next step even when every slot is taken, as long
  as fewer than `max_batch_size` owners share the batch: every owner is entitled to one row beyond the
  slots (so the batch holds at most `2 * max_batch_size - 1` rows). Only when the batch already has
  `max_batch_size` owners does a newcomer wait for a row to finish; it then goes first.

Requests without an owner share one queue, so a caller that never names one gets FIFO order.
"""

from __future__ import annotations

import itertools
from collections import Counter, deque

from .batch import Request


class Waiting:
    """Requests not admitted yet: one FIFO queue per owner, served as the module docstring says."""

    def __init__(self) -> None:
        self._queues: dict[str | None, deque[Request]] = {}
        self._arrivals = itertools.count()

    def __bool__(self) -> bool:
        return bool(self._queues)

    def add(self, request: Request) -> None:
        request.arrival = next(self._arrivals)
        self._queues.setdefault(request.owner, deque()).append(request)

    def requests(self) -> list[Request]:
        return [request for fifo in self._queues.values() for request in fifo]

    def take(self, running: Counter[str | None], rows: int, slots: int) -> list[Request]:
        """Pop the requests to admit into a batch of `rows` rows, given each owner's running rows."""
        admitted: list[Request] = []
        while heads := self._heads():
            head = min(heads, key=lambda request: (running[request.owner], request.arrival))
            newcomer = running[head.owner] == 0 and len(running) < slots
            if rows >= slots and not newcomer:
                break
            self._queues[head.owner].popleft()
            admitted.append(head)
            running[head.owner] += 1
            rows += 1
        return admitted

    def _heads(self) -> list[Request]:
        """Each owner's oldest live request; cancelled requests and empty queues are dropped."""
        heads = []
        for owner, fifo in list(self._queues.items()):
            while fifo and fifo[0].cancelled:
                fifo.popleft()
            if fifo:
                heads.append(fifo[0])
            else:
                del self._queues[owner]
        return heads
