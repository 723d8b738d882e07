"""The order training tasks (or demonstrations) are taken in: a seeded shuffle, epoch after epoch. The
curriculum falls back to it and ranks ties by it, so both read the one order defined here."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Generic, TypeVar

Item = TypeVar("Item")


def shuffled_order(count: int, seed: int, epoch: int) -> list[int]:
    """The indices 0..count-1 in epoch `epoch`'s order for `seed`."""
    order = list(range(count))
    random.Random(seed * 1_000_003 + epoch).shuffle(order)
    return order


class TaskCursor(Generic[Item]):
    """Walks the items in a seeded shuffled order, epoch after epoch; its position is saved."""

    def __init__(self, tasks: Sequence[Item], seed: int, position: int = 0) -> None:
        self.tasks = list(tasks)
        self.seed = seed
        self.position = position

    def take(self, count: int) -> list[Item]:
        picked = []
        for _ in range(count):
            epoch, index = divmod(self.position, len(self.tasks))
            picked.append(self.tasks[shuffled_order(len(self.tasks), self.seed, epoch)[index]])
            self.position += 1
        return picked
