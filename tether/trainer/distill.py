"""The distillation teacher over HTTP: the logprob it gives each token the student sampled.

A teacher is any OpenAI-compatible completions endpoint that answers vLLM's `prompt_logprobs`: vLLM
itself, or a `tether serve` of the built-in engine (`--adapter` serves a trained LoRA). Each transition
is one call: its prompt and response token ids as the prompt, `prompt_logprobs: 0` (the logprob of each
prompt token itself), temperature 1 so that a server in processed-logprobs mode answers the same
unprocessed distribution.

    teacher = Teacher(url="http://127.0.0.1:8000/rollouts/R/v1", model="teacher")
    check_teacher(teacher, tokenizer)                  # at start: answers, and shares the tokenizer
    scores = await score_transitions(teacher, transitions)

Student and teacher must share a tokenizer, or the ids mean different text to each: `check_teacher`
asks for a probe sentence in the student's ids and compares the tokens the teacher decodes them to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from tether.adapters.transitions import Transition

PROBE = "A teacher and its student share one tokenizer: 12 + 7 = 19, and so on."


class TeacherError(RuntimeError):
    """The teacher could not score (unreachable, an error, no prompt logprobs) or does not share the
    student's tokenizer."""


@dataclass(frozen=True)
class Teacher:
    url: str  # the OpenAI-compatible base URL, ending in /v1
    model: str = "teacher"
    api_key: str = "none"
    timeout_s: float = 120.0
    retries: int = 2
    concurrency: int = 8  # calls in flight at once


async def score_transitions(teacher: Teacher, transitions: Sequence[Transition]) -> list[list[float]]:
    """The teacher's logprob of every response token of each transition (context tokens included; the
    loss mask decides which count)."""
    limit = asyncio.Semaphore(teacher.concurrency)
    async with _client(teacher) as client:

        async def one(transition: Transition) -> list[float]:
            async with limit:
                where = f"rollout {transition.rollout_id!r} call {transition.call_index}"
                ids = [*transition.prompt_ids, *transition.response_ids]
                entries = await _entries(client, teacher, ids, where)
                return [float(entry["logprob"]) for entry in entries[len(transition.prompt_ids) - 1 :]]

        return list(await asyncio.gather(*(one(t) for t in transitions)))


def check_teacher(teacher: Teacher, tokenizer: Any) -> None:
    """TeacherError unless the teacher scores a probe in the student's token ids and decodes each of them
    to the student's own token text."""
    ids = [int(i) for i in tokenizer.encode(PROBE, add_special_tokens=False)]
    entries = asyncio.run(_probe(teacher, ids))
    if not all(isinstance(entry.get("decoded_token"), str) for entry in entries):
        raise TeacherError(
            f"the teacher at {teacher.url} gives no decoded_token with its prompt logprobs, so whether it "
            "shares the student's tokenizer cannot be checked (vLLM and `tether serve` give them)"
        )
    mismatched = [
        (token_id, entry["decoded_token"])
        for token_id, entry in zip(ids[1:], entries, strict=True)
        if entry["decoded_token"]
        not in (tokenizer.decode([token_id]), tokenizer.convert_ids_to_tokens(token_id))
    ]
    if mismatched:
        token_id, decoded = mismatched[0]
        raise TeacherError(
            f"the teacher at {teacher.url} does not share the student's tokenizer: the student's token "
            f"{token_id} ({tokenizer.decode([token_id])!r}) is {decoded!r} to the teacher "
            f"({len(mismatched)} of {len(ids) - 1} probe tokens differ); on-policy distillation needs "
            "one tokenizer for both models"
        )


async def _probe(teacher: Teacher, ids: list[int]) -> list[dict[str, Any]]:
    async with _client(teacher) as client:
        return await _entries(client, teacher, ids, "the tokenizer probe")


def _client(teacher: Teacher) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {teacher.api_key}"}
    return httpx.AsyncClient(timeout=teacher.timeout_s, headers=headers)


async def _entries(
    client: httpx.AsyncClient, teacher: Teacher, ids: list[int], where: str
) -> list[dict[str, Any]]:
    """The teacher's entry (logprob, decoded token) for each of `ids` after the first, retrying failed
    calls `retries` times."""
    body = {
        "model": teacher.model,
        "prompt": ids,
        "max_tokens": 1,
        "temperature": 1.0,
        "prompt_logprobs": 0,
    }
    url = f"{teacher.url.rstrip('/')}/completions"
    problem = ""
    for _ in range(teacher.retries + 1):
        try:
            response = await client.post(url, json=body)
        except httpx.HTTPError as exc:
            problem = f"cannot reach it ({type(exc).__name__}: {exc})"
            continue
        if response.status_code >= 400:
            problem = f"it answered {response.status_code}: {response.text[:300]}"
            if response.status_code < 500:
                break
            continue
        return _parse(response.json(), ids, teacher, where)
    raise TeacherError(f"the teacher at {teacher.url} did not score {where}: {problem}")


def _parse(data: Any, ids: list[int], teacher: Teacher, where: str) -> list[dict[str, Any]]:
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    entries = first.get("prompt_logprobs")  # vLLM answers them per choice
    if not isinstance(entries, list) or len(entries) != len(ids):
        raise TeacherError(
            f"the teacher at {teacher.url} returned no prompt logprobs for {where} (its answer has "
            f"{'none' if not isinstance(entries, list) else f'{len(entries)} for {len(ids)} tokens'}): "
            "serve it with vLLM (which answers prompt_logprobs) or `tether serve`"
        )
    picked = []
    for token_id, entry in zip(ids[1:], entries[1:], strict=True):
        value = entry.get(str(token_id)) if isinstance(entry, dict) else None
        if not isinstance(value, dict) or not isinstance(value.get("logprob"), int | float):
            raise TeacherError(
                f"the teacher at {teacher.url} gave no logprob for token {token_id} of {where}"
            )
        picked.append(value)
    return picked
