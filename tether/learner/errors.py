"""The learner's errors, shared by every learner and the loop that calls them."""

from __future__ import annotations


class TrainingDiverged(RuntimeError):
    """A non-finite loss or gradient; the update was not applied and the gradients were cleared."""


class LearnerLost(RuntimeError):
    """A part of a distributed learner died (its message says which, and where); the step did not apply."""
