"""One rollout for the dashboard: attempts, rewards, the span waterfall, each call's messages and tokens,
each judge's call (what it was shown, its reply and the score it gave), and how its calls became
transitions (merges, breaks and why, rewards, advantages, loss weights)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether.adapters import Transition, TransitionReport, build_transitions
from tether.algorithms.advantages import AdvantageBatch, assign_advantages
from tether.contracts import ADVANTAGE_METHODS, JUDGE_SPAN, CallAttr, is_call_span
from tether.dashboard.tokens import TokenDecoder
from tether.runner.runs import load_run
from tether.store.base import NotFound, Store
from tether.store.records import Rollout, RolloutQuery, Span
from tether.store.reward_rule import rollout_reward

ALL_SPANS = 100_000
GROUP_LIMIT = 1000  # rollouts of one group read to compute advantages
SCALAR_ATTRIBUTES = 12  # attributes of a non-call span shown in the waterfall
TEXT_LIMIT = 240
JUDGE_MESSAGE_CHARS = 20_000  # of each message a judge was shown (its reply is given whole)


def rollout_detail(store: Store, rollout_id: str) -> dict[str, Any]:
    rollout = store.get_rollout(rollout_id)
    spans = store.query_spans(rollout_id=rollout_id, limit=ALL_SPANS)
    return {
        "rollout": rollout.model_dump(mode="json"),
        "reward": rollout_reward(store, rollout),
        "attempts": [a.model_dump(mode="json") for a in store.list_attempts(rollout_id)]
        if rollout.attempt_count
        else [],
        "rewards": [r.model_dump(mode="json") for r in store.query_rewards(rollout_id)],
        "spans": [_waterfall_row(span) for span in spans],
    }


def _waterfall_row(span: Span) -> dict[str, Any]:
    row: dict[str, Any] = {
        "span_id": span.span_id,
        "parent_id": span.parent_id,
        "name": span.name,
        "kind": span.kind,
        "attempt": span.attempt,
        "start": span.start_time,
        "end": span.end_time,
        "status": span.status,
        "message": span.status_message,
        "origin": span.origin,
        "call": is_call_span(span.name),
        "judge": span.name == JUDGE_SPAN,
    }
    attrs = span.attributes
    if row["call"]:
        choices = attrs.get(CallAttr.CHOICES) or []
        row["summary"] = {
            "model": attrs.get(CallAttr.MODEL),
            "agent": attrs.get(CallAttr.AGENT),
            "latency_ms": attrs.get(CallAttr.LATENCY_MS),
            "policy": attrs.get(CallAttr.UPSTREAM),  # the upstream that answered: the policy, in training
            "policy_version": attrs.get(CallAttr.POLICY_VERSION),
            "prompt_tokens": len(attrs.get(CallAttr.PROMPT_TOKEN_IDS) or []),
            "response_tokens": sum(len(c.get("token_ids") or []) for c in choices),
            "finish_reason": choices[0].get("finish_reason") if choices else None,
        }
    else:
        scalars = [(k, v) for k, v in attrs.items() if isinstance(v, str | int | float | bool) or v is None]
        row["summary"] = {k: _short(v) for k, v in scalars[:SCALAR_ATTRIBUTES]}
    return row


def _short(value: Any) -> Any:
    if isinstance(value, str) and len(value) > TEXT_LIMIT:
        return value[:TEXT_LIMIT] + "…"
    return value


def call_detail(store: Store, decoder: TokenDecoder, rollout_id: str, span_id: str) -> dict[str, Any]:
    """One model call: the request as the agent sent it, the response, and its tokens (prompt tokens
    are context, never trained; response tokens are trained when the call became part of a transition)."""
    span = _span(store, rollout_id, span_id, "model call", is_call_span)
    report = build_transitions(store, [rollout_id], merge=True, attempts="all")
    outcome = report.call_outcomes.get(span_id, "not_trained")
    trained = outcome in ("started", "merged")
    attrs = span.attributes
    choices = attrs.get(CallAttr.CHOICES) or []
    first = choices[0] if choices else {}
    prompt_ids = [int(t) for t in attrs.get(CallAttr.PROMPT_TOKEN_IDS) or []]
    response_ids = [int(t) for t in first.get("token_ids") or []]
    logprobs = first.get("logprobs") or []
    prompt = _tokens(decoder, prompt_ids, None, [0] * len(prompt_ids))
    response = _tokens(decoder, response_ids, logprobs, [int(trained)] * len(response_ids))
    return {
        "span_id": span_id,
        "request": attrs.get(CallAttr.REQUEST),
        "chat_request": attrs.get(CallAttr.CHAT_REQUEST),
        "api": attrs.get(CallAttr.API),
        "response": attrs.get(CallAttr.RESPONSE),
        "error": attrs.get(CallAttr.ERROR),
        "choices": [{k: v for k, v in c.items() if k not in ("token_ids", "logprobs")} for c in choices],
        "policy": attrs.get(CallAttr.UPSTREAM),
        "policy_version": attrs.get(CallAttr.POLICY_VERSION),
        "latency_ms": attrs.get(CallAttr.LATENCY_MS),
        "model": attrs.get(CallAttr.MODEL),
        "agent": attrs.get(CallAttr.AGENT),
        "outcome": outcome,
        "break_reason": report.break_reasons.get(span_id),
        "decoded": decoder.available,
        "prompt_tokens": prompt,
        "response_tokens": response,
    }


def judge_detail(store: Store, rollout_id: str, span_id: str) -> dict[str, Any]:
    """One call of a judge that scored the rollout (`tether.rewards.judge`): the messages it was shown,
    its reply, and the score it gave (a ranking judge's: the scores of its group's attempts, in the order
    it saw them), or why it gave none. Never trained on. All of it is text for the page to show as text:
    the messages and the reply quote what the agent wrote."""
    span = _span(store, rollout_id, span_id, "judge call", lambda name: name == JUDGE_SPAN)
    attrs = span.attributes
    request = attrs.get("request")
    if not isinstance(request, dict):
        request = {}
    messages = [
        {"role": str(m.get("role")), **_cut(str(m.get("content") or ""), JUDGE_MESSAGE_CHARS)}
        for m in request.get("messages") or []
        if isinstance(m, dict)
    ]
    score = attrs.get("score")
    return {
        "span_id": span.span_id,
        "attempt": span.attempt,
        "model": attrs.get("model"),
        "url": attrs.get("url"),
        "status": span.status,
        "message": span.status_message,
        "latency_ms": None if span.end_time is None else (span.end_time - span.start_time) * 1000,
        "reply": attrs.get("reply"),
        "score": score if _is_number(score) else None,
        "scores": score if isinstance(score, list) and all(map(_is_number, score)) else None,
        "messages": messages,
    }


def _span(store: Store, rollout_id: str, span_id: str, what: str, kind: Callable[[str], bool]) -> Span:
    spans = store.query_spans(rollout_id=rollout_id, limit=ALL_SPANS)
    span = next((s for s in spans if s.span_id == span_id and kind(s.name)), None)
    if span is None:
        raise NotFound(what, f"{rollout_id}/{span_id}")
    return span


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cut(text: str, limit: int) -> dict[str, Any]:
    return {"content": text[:limit], "chars": len(text), "cut": len(text) > limit}


def _tokens(
    decoder: TokenDecoder, ids: list[int], logprobs: list[Any] | None, mask: list[int]
) -> list[dict[str, Any]]:
    known = logprobs or []
    return [
        {"id": token_id, "t": text, "lp": known[i] if i < len(known) else None, "m": mask[i]}
        for i, (token_id, text) in enumerate(zip(ids, decoder.pieces(ids), strict=True))
    ]


def transitions_view(store: Store, decoder: TokenDecoder, rollout_id: str) -> dict[str, Any]:
    """The rollout's calls as training samples, the way `tether train` builds them (merged, last
    attempt), with advantages computed against the rollout's group."""
    rollout = store.get_rollout(rollout_id)
    method = _advantage_method(store, rollout)
    group = _group_of(store, rollout)
    report = build_transitions(store, group, merge=True)
    batch = assign_advantages(report.transitions, method=method)
    mine = [t for t in report.transitions if t.rollout_id == rollout_id]
    own = build_transitions(store, [rollout], merge=True)
    return {
        "method": method,
        "group_size": len(group),
        "group_used": any(s.rollout_id == rollout_id for s in batch.samples),
        "summary": own.summary(),
        "calls": _call_rows(store, rollout_id, own),
        "transitions": [_transition_row(decoder, t, batch) for t in mine],
    }


def _advantage_method(store: Store, rollout: Rollout) -> Any:
    record = load_run(store, rollout.run) if rollout.run else None
    algorithm = (record.settings if record else {}).get("algorithm")
    return algorithm if algorithm in ADVANTAGE_METHODS else "grpo"


def _group_of(store: Store, rollout: Rollout) -> list[Rollout]:
    if rollout.group_id is None:
        return [rollout]
    page = store.query_rollouts(
        RolloutQuery(run=rollout.run, group_id=rollout.group_id, limit=GROUP_LIMIT, oldest_first=True)
    )
    members = [row.rollout for row in page.rows if row.rollout.status.finished]
    return members if any(r.id == rollout.id for r in members) else [*members, rollout]


def _call_rows(store: Store, rollout_id: str, report: TransitionReport) -> list[dict[str, Any]]:
    spans = store.query_spans(rollout_id=rollout_id, limit=ALL_SPANS)
    return [
        {
            "span_id": span.span_id,
            "attempt": span.attempt,
            "agent": span.attributes.get(CallAttr.AGENT),
            "outcome": report.call_outcomes.get(span.span_id, "not_considered"),
            "break_reason": report.break_reasons.get(span.span_id),
        }
        for span in spans
        if is_call_span(span.name)
    ]


def _transition_row(decoder: TokenDecoder, transition: Transition, batch: AdvantageBatch) -> dict[str, Any]:
    sample = next((s for s in batch.samples if s.transition is transition), None)
    return {
        "call_index": transition.call_index,
        "agent": transition.agent,
        "attempt": transition.attempt,
        "span_ids": transition.span_ids,
        "policy_version": transition.policy_version,
        "reward": transition.reward,
        "step_reward": transition.step_reward,
        "advantage": None if sample is None else sample.advantage,
        "weight": None if sample is None else sample.weight,
        "trained_tokens": transition.trained_tokens,
        "prompt_tokens": _tokens(decoder, transition.prompt_ids, None, [0] * len(transition.prompt_ids)),
        "response_tokens": _tokens(
            decoder, transition.response_ids, transition.response_logprobs, transition.loss_mask
        ),
    }
