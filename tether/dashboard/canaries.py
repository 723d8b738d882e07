"""Canary decisions: every version of every canary resource (`tether.deploy` records one per decision:
started, promoted, rolled back, refused), with the comparison that decided it and the state after it."""

from __future__ import annotations

from typing import Any

from tether.contracts import CANARY_RESOURCE_KIND
from tether.store.base import Store

MAX_DECISIONS = 1000  # read per deployment, newest first


def canary_decisions(store: Store) -> list[dict[str, Any]]:
    deployments = []
    for latest in store.list_resources():
        if latest.kind != CANARY_RESOURCE_KIND:
            continue
        first = max(1, latest.version - MAX_DECISIONS + 1)
        decisions = [store.get_resource(latest.name, v) for v in range(latest.version, first - 1, -1)]
        state = latest.value.get("state", {}) if isinstance(latest.value, dict) else {}
        deployments.append(
            {
                "deployment": latest.name.removeprefix("canary:"),
                "incumbent": state.get("incumbent"),
                "canary": state.get("canary"),
                "decisions": [
                    {"version": r.version, **_decision(r.value)}
                    for r in decisions
                    if isinstance(r.value, dict)
                ],
            }
        )
    return deployments


def _decision(value: dict[str, Any]) -> dict[str, Any]:
    state = value.get("state") or {}
    return {
        "event": value.get("event"),
        "reason": value.get("reason"),
        "time": value.get("time"),
        "comparison": value.get("comparison"),
        "incumbent": (state.get("incumbent") or {}).get("version"),
        "canary": (state.get("canary") or {}).get("version"),
    }
