"""The keys a run may need. They are never settings: a config file, a command line and a run folder would
each show them to whoever reads it (docs/security.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tether.contracts import JUDGE_KEY_ENV, OPTIMIZER_KEY_ENV, TEACHER_KEY_ENV, UPSTREAM_KEY_ENV


@dataclass(frozen=True)
class Secrets:
    """The keys of a run's services, each None where it needs none; `Secrets.from_environment()`
    reads each from its variable, as the command line does where no `--...-key-file` is given."""

    upstream_key: str | None = None  # --upstream's, and the openai policy server's
    judge_key: str | None = None  # --judge-url's
    teacher_key: str | None = None  # --teacher's
    optimizer_key: str | None = None  # --optimizer-endpoint's

    @classmethod
    def from_environment(cls) -> Secrets:
        """Each key from its environment variable, where set."""
        return cls(
            upstream_key=os.environ.get(UPSTREAM_KEY_ENV) or None,
            judge_key=os.environ.get(JUDGE_KEY_ENV) or None,
            teacher_key=os.environ.get(TEACHER_KEY_ENV) or None,
            optimizer_key=os.environ.get(OPTIMIZER_KEY_ENV) or None,
        )
