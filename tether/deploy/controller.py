"""The canary, run by `tether serve`: it finds new policy versions in a folder a trainer writes
(`tether train --from-sessions` writes `RUN_DIR/policies/vN`), serves the newest as a canary to a share of
new sessions, compares the rewards posted for them later with the incumbent's, and promotes or rolls back
by the rule (`tether.deploy.canary`). One canary at a time; a version that appears meanwhile waits.

Every change (a canary started, promoted, rolled back, or refused for weights that do not load) is a new
version of the store resource `canary:RUN` with the state after it and the figures that decided it, so a
restarted server serves what was decided, and the dashboard shows each decision. The canary's weights
are an adapter of its own in the built-in engine (`ServesSeveralPolicies`), routed by the session's
metadata; when it is promoted the incumbent's adapter takes its weights, when it is rolled back its
sessions' later calls go to the incumbent."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tether.contracts import CANARY_RESOURCE_KIND, Meta
from tether.deploy.canary import CANARY, INCUMBENT, CanaryRule, Comparison, Decision, arm_of, compare, decide
from tether.gateway.app import Gateway
from tether.gateway.upstreams import Upstream
from tether.periodic import Periodic
from tether.policy_server.base import PolicyWeights, folder_version
from tether.store import Store
from tether.store.base import NotFound
from tether.store.records import RolloutQuery

log = logging.getLogger(__name__)

CANARY_POLICY = "canary"  # the engine's adapter name for the canary's weights
SCAN_LIMIT = 10_000  # newest sessions read per comparison
RESAMPLES = 2_000


class LoadsPolicies(Protocol):
    """What the canary needs of the policy server (the built-in one has it)."""

    async def load(self, weights: PolicyWeights) -> int: ...

    async def load_policy(self, weights: PolicyWeights, policy: str) -> int: ...

    def policy_upstream(self, policy: str) -> Upstream: ...


@dataclass
class PolicyArm:
    version: int  # 0: the base model
    path: str | None = None  # the adapter folder (None: the base model)
    started: float | None = None  # when it began serving as the canary


@dataclass
class CanaryState:
    incumbent: PolicyArm = field(default_factory=lambda: PolicyArm(0))
    canary: PolicyArm | None = None
    seen: int = 0  # the newest version found in the folder (served or refused)

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> CanaryState:
        canary = value.get("canary")
        return cls(PolicyArm(**value["incumbent"]), PolicyArm(**canary) if canary else None, value["seen"])


def route_name(version: int) -> str:
    """The gateway upstream a canary's sessions call: its own per version, so the sessions of a canary
    that is gone fall back to the incumbent."""
    return f"{CANARY_POLICY}-v{version}"


class CanaryController:
    def __init__(
        self,
        store: Store,
        gateway: Gateway,
        server: LoadsPolicies,
        run: str,
        watch: Path,
        rule: CanaryRule,
        incumbent: PolicyArm,
    ) -> None:
        rule.check()
        self.store, self.gateway, self.server = store, gateway, server
        self.run, self.watch, self.rule = run, watch, rule
        self.resource = f"canary:{run}"
        self.state = CanaryState(incumbent)
        self.last: Decision | None = None
        self._lock = threading.Lock()
        self._periodic = Periodic("tether-canary", self.tick)
        self._cache: tuple[tuple[Any, ...], Comparison] | None = None

    # -- sessions -------------------------------------------------------------------------------------

    def assign(self, session: str) -> dict[str, Any]:
        """A new session's metadata: the arm that serves it (`SessionBook`'s hook)."""
        canary = self.state.canary
        if canary is None:
            return {Meta.ARM: INCUMBENT}
        arm = arm_of(session, self.rule.share)
        meta: dict[str, Any] = {Meta.ARM: arm, Meta.CANARY: canary.version}
        if arm == CANARY:
            meta[Meta.UPSTREAM] = route_name(canary.version)
        return meta

    # -- state ----------------------------------------------------------------------------------------

    def restore(self) -> CanaryState:
        """What the last recorded decision left served, loaded into the engine (nothing recorded: the
        incumbent given at start)."""
        try:
            recorded = self.store.get_resource(self.resource)
        except NotFound:
            return self.state
        self.state = CanaryState.from_dict(recorded.value["state"])
        incumbent, canary = self.state.incumbent, self.state.canary
        if incumbent.path is not None:
            try:
                self._run(self.server.load(PolicyWeights(Path(incumbent.path), "lora", incumbent.version)))
            except Exception as exc:  # noqa: BLE001 - said as one line: the deployment cannot serve
                raise ValueError(
                    f"the deployment's incumbent v{incumbent.version} ({incumbent.path}) does not load: {exc}"
                ) from None
        if canary is not None and canary.path is not None:
            try:
                self._serve_canary(canary)
            except Exception as exc:  # noqa: BLE001 - its folder went away: the incumbent serves all
                self.state.canary = None
                self._record("refused", f"v{canary.version} from {canary.path} does not load again: {exc}")
        return self.state

    def _record(self, event: str, reason: str, comparison: Comparison | None = None) -> None:
        value = {
            "event": event,
            "reason": reason,
            "time": time.time(),
            "rule": asdict(self.rule),
            "comparison": comparison.as_dict() if comparison else None,
            "state": asdict(self.state),
        }
        self.store.put_resource(self.resource, CANARY_RESOURCE_KIND, value)
        log.info("canary %s: %s", event, reason)

    # -- one look ---------------------------------------------------------------------------------------

    def tick(self) -> Decision | None:
        """Decide on the running canary, or start the newest new version as one."""
        with self._lock:
            canary = self.state.canary
            if canary is None:
                self._start_newest()
                return None
            decision = decide(self.rule, self.comparison(canary))
            self.last = decision
            if decision.verdict == "promote":
                self._promote(canary, decision)
            elif decision.verdict == "rollback":
                self._rollback(canary, decision)
            return decision

    def comparison(self, canary: PolicyArm) -> Comparison:
        """Each arm's rewarded sessions opened while `canary` ran."""
        page = self.store.query_rollouts(RolloutQuery(run=self.run, limit=SCAN_LIMIT))
        rewards: dict[str, list[float]] = {INCUMBENT: [], CANARY: []}
        for row in page.rows:
            meta = row.rollout.metadata
            if meta.get(Meta.CANARY) == canary.version and row.reward is not None:
                rewards.setdefault(str(meta.get(Meta.ARM)), []).append(float(row.reward))
        key = (canary.version, tuple(rewards[INCUMBENT]), tuple(rewards[CANARY]))
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, compare(rewards[INCUMBENT], rewards[CANARY], self.rule.confidence, RESAMPLES))
        return self._cache[1]

    def _start_newest(self) -> None:
        found = newest_version(self.watch, after=self.state.seen)
        if found is None:
            return
        version, path = found
        self.state.seen = version
        arm = PolicyArm(version, str(path), time.time())
        try:
            self._serve_canary(arm)
        except Exception as exc:  # noqa: BLE001 - weights that do not load are refused, the server goes on
            self._record("refused", f"v{version} from {path} does not load: {exc}")
            return
        self.state.canary = arm
        self._record("started", f"v{version} serves {self.rule.share:.0%} of new sessions")

    def _serve_canary(self, arm: PolicyArm) -> None:
        assert arm.path is not None
        self._run(self.server.load_policy(PolicyWeights(Path(arm.path), "lora", arm.version), CANARY_POLICY))
        self.gateway.upstreams[route_name(arm.version)] = self.server.policy_upstream(CANARY_POLICY)

    def _promote(self, canary: PolicyArm, decision: Decision) -> None:
        assert canary.path is not None
        self._run(self.server.load(PolicyWeights(Path(canary.path), "lora", canary.version)))
        self.gateway.upstreams.pop(route_name(canary.version), None)
        self.state.incumbent = PolicyArm(canary.version, canary.path)
        self.state.canary = None
        self._record("promoted", f"v{canary.version}: {decision.reason}", decision.comparison)

    def _rollback(self, canary: PolicyArm, decision: Decision) -> None:
        self.gateway.upstreams.pop(route_name(canary.version), None)
        self.state.canary = None
        self._record("rolled back", f"v{canary.version}: {decision.reason}", decision.comparison)

    @staticmethod
    def _run(coroutine: Any) -> Any:
        return asyncio.run(coroutine)

    # -- the loop -----------------------------------------------------------------------------------------

    def start(self, interval_s: float) -> None:
        self._periodic.start(interval_s)

    def stop(self) -> None:
        self._periodic.stop()


def newest_version(folder: Path, after: int) -> tuple[int, Path] | None:
    """The newest `vN` adapter folder under `folder` with N > `after`."""
    if not folder.is_dir():
        return None
    found = [
        (version, path)
        for path in folder.iterdir()
        if (version := folder_version(path)) is not None and (path / "adapter_config.json").is_file()
    ]
    newer = [item for item in found if item[0] > after]
    return max(newer) if newer else None
