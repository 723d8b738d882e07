"""What the trainer needs from whatever serves the policy: its version, the upstream the gateway routes
the policy's calls to, and a way to load new weights (with pause and resume around the load)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from tether.gateway.upstreams import Upstream

WeightsKind = Literal["lora", "full"]


class PolicyServerError(RuntimeError):
    """A policy server that cannot start, load weights or serve; the message names the fix."""


@dataclass(frozen=True)
class PolicyWeights:
    """One saved policy version: a PEFT LoRA adapter folder, or a whole model folder.

    Every version has its own folder, so a server in another process can load version N while it still
    serves N-1 from the folder next to it.
    """

    path: Path
    kind: WeightsKind
    version: int


VERSION_FOLDER = re.compile(r"v(\d+)")


def folder_version(path: Path) -> int | None:
    """N of a version's own folder, `.../vN` (as trainers write `policies/vN`); None for another name."""
    match = VERSION_FOLDER.fullmatch(path.name)
    return int(match.group(1)) if match else None


class PolicyServer(Protocol):
    @property
    def policy_version(self) -> int | None:
        """The version it serves now (0: the base model; None: a model Tether does not manage), the one
        its upstream records."""
        ...

    def upstream(self) -> Upstream:
        """The gateway upstream that serves the policy's calls, recording this server's versions."""
        ...

    async def load(self, weights: PolicyWeights) -> int:
        """Serve these weights from now on; returns the new policy version."""
        ...

    async def pause(self) -> None:
        """Stop starting new generations (in-flight ones finish); calls wait, they are not refused."""
        ...

    async def resume(self) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class ServesSeveralPolicies(Protocol):
    """A policy server that also serves several LoRA adapters side by side on one base model, each under
    its own policy name with its own version (`--policy NAME=lora:rR`)."""

    def policy_upstream(self, policy: str) -> Upstream:
        """The upstream whose calls sample from `policy`'s adapter (the base model until its first load)."""
        ...

    def version_of(self, policy: str) -> int: ...

    async def load_policy(self, weights: PolicyWeights, policy: str) -> int:
        """Serve these weights as `policy` from now on (the other policies keep theirs)."""
        ...
