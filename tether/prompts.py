"""Prompt templates as versioned store resources (kind `prompt`), and `get_prompt` for agents.

An agent run by Tether may fetch its prompt instead of hard-coding it:

    system = tether.get_prompt("system", default="You are a helpful assistant.")

Inside a rollout (the runner sets `TETHER_SERVER`, `TETHER_ROLLOUT_ID` and `OPENAI_API_KEY`), the candidate
under evaluation wins when the rollout carries one for this name (prompt optimization puts it in the
rollout's metadata under `prompt_candidate`); otherwise the latest version of the resource is read from
the store (`GET /store/resources/{name}`). Outside Tether, or when nothing is stored, `default` is
returned; without a default that is a `LookupError`.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import orjson

PROMPT_KIND = "prompt"
PROMPT_CANDIDATE = "prompt_candidate"  # rollout metadata key: {"name": resource name, "text": candidate}
TIMEOUT_S = 10.0
_MISSING: Any = object()


def prompt_text(value: Any) -> str:
    """The text of a prompt resource's value: the value itself, or its `text` field."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    raise ValueError("a prompt resource's value is a string or an object with a string 'text'")


def get_prompt(
    name: str = "system",
    default: str = _MISSING,
    *,
    version: int | None = None,
    server: str | None = None,
    token: str | None = None,
    rollout_id: str | None = None,
) -> str:
    """The prompt `name` for this rollout: the candidate under evaluation, else the stored resource."""
    server = server or os.environ.get("TETHER_SERVER")
    token = token or os.environ.get("OPENAI_API_KEY")
    rollout_id = rollout_id or os.environ.get("TETHER_ROLLOUT_ID")
    if not (server and token):
        if default is not _MISSING:
            return default
        raise LookupError(
            f"prompt {name!r}: not running under Tether (no TETHER_SERVER or OPENAI_API_KEY) and no default"
        )
    base = server.rstrip("/")
    if rollout_id and version is None:
        rollout = _get_json(f"{base}/store/rollouts/{urllib.parse.quote(rollout_id, safe='')}", token)
        candidate = (rollout or {}).get("metadata", {}).get(PROMPT_CANDIDATE)
        if isinstance(candidate, dict) and candidate.get("name") == name:
            return prompt_text(candidate)
    query = "" if version is None else f"?version={int(version)}"
    resource = _get_json(f"{base}/store/resources/{urllib.parse.quote(name, safe='')}{query}", token)
    if resource is None:
        if default is not _MISSING:
            return default
        raise LookupError(
            f"prompt {name!r} is not in the store" + ("" if version is None else f" @{version}")
        )
    return prompt_text(resource.get("value"))


def _get_json(url: str, token: str) -> Any:
    """The JSON answer of a GET; None on 404."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        detail = exc.read().decode(errors="replace")[:300]
        raise RuntimeError(f"reading {url} failed with HTTP {exc.code}: {detail}") from None
