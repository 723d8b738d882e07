"""Prompt-search candidates: every version of every prompt resource, with its score and the critique
that produced it (`tether.prompt_search.search` records one version per settled candidate)."""

from __future__ import annotations

from typing import Any

from tether.prompts import PROMPT_KIND
from tether.store.base import Store

MAX_VERSIONS = 2000  # versions read per prompt


def prompt_searches(store: Store) -> list[dict[str, Any]]:
    searches = []
    for latest in store.list_resources():
        if latest.kind != PROMPT_KIND:
            continue
        first = max(1, latest.version - MAX_VERSIONS + 1)
        versions = [store.get_resource(latest.name, v) for v in range(first, latest.version + 1)]
        candidates = [
            {"version": r.version, "created_at": r.created_at, **_candidate(r.value)}
            for r in versions
            if isinstance(r.value, dict)
        ]
        searches.append({"prompt": latest.name, "candidates": candidates})
    return searches


def _candidate(value: dict[str, Any]) -> dict[str, Any]:
    keys = ("candidate", "text", "origin", "parents", "round", "score", "task_scores", "status", "reason")
    return {key: value.get(key) for key in (*keys, "critique", "algorithm", "run", "best")}
