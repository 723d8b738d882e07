"""Demonstrations: a run's successful rollouts, whose calls another model answered, as supervised samples.

A rollout recorded against an external upstream (a scripted teacher, a hosted API) has its calls' text
but not tokens the policy generated. `build_demonstrations` renders each recorded call with the
policy's own chat template (`tether.models.chat_template`): the prompt exactly as the built-in engine
would render it, and the answer (content and tool calls) as the tokens the policy would have to generate
to give it. The transitions are marked `demonstration`, carry no logprobs (0.0) and no policy version,
and are trained on by imitation only (`tether.algorithms.imitation_batch`); an RL batch refuses them.

Which rollouts (`demonstrations_of`, given the records of a run's succeeded rollouts): those whose final
reward is at least `min_reward`, and whose last attempt has no failed model call. A call the teacher
refused (a task it has no reference for) is a failed call, so that rollout is not a demonstration.
Merging follows `tether.adapters.build`: consecutive calls of one agent merge while each prompt extends
the sequence so far, the tokens in between (tool results, the next turn) masked out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.adapters.build import _AgentFilter, _Call, _Chain, _label_agents, _last_attempt
from tether.adapters.transitions import Transition
from tether.contracts import CallAttr, Origin, SpanStatus, is_call_span
from tether.models.chat_template import ChatTemplate, TemplateError
from tether.sampling import RAW
from tether.store.records import RolloutRecord, Span
from tether.store.reward_rule import rollout_final_reward


class NoDemonstrations(ValueError):
    """A run that holds no rollout fit to imitate."""


@dataclass
class DemonstrationReport:
    transitions: list[Transition] = field(default_factory=list)
    rollouts: int = 0
    calls: int = 0
    skipped: Counter[str] = field(default_factory=Counter)

    @property
    def trained_tokens(self) -> int:
        return sum(t.trained_tokens for t in self.transitions)

    def summary(self) -> str:
        text = (
            f"{len(self.transitions)} demonstration transitions ({self.trained_tokens} trained tokens) from "
            f"{self.calls} calls in {self.rollouts} rollouts"
        )
        if self.skipped:
            text += "; skipped: " + ", ".join(f"{k} {n}" for k, n in self.skipped.most_common())
        return text


def demonstrations_of(
    run: str,
    records: Sequence[RolloutRecord],
    *,
    min_reward: float = 1.0,
    task_ids: Collection[str] | None = None,
    held_out: Collection[str] = (),
) -> list[RolloutRecord]:
    """Of a run's succeeded rollouts (`records`), those fit to imitate (see the module docstring), oldest
    first, of `task_ids` only when given. Raises NoDemonstrations, naming why, when there is none, or
    when the run holds a rollout of a `held_out` task (validation tasks must never be demonstrated)."""
    leaked = sorted({r.rollout.task_id for r in records} & set(held_out))
    if leaked:
        raise NoDemonstrations(
            f"run {run!r} holds rollouts of {len(leaked)} held-out task(s) ({leaked[0]} first): "
            "demonstrations must come from training tasks only"
        )
    wanted = [r for r in records if task_ids is None or r.rollout.task_id in task_ids]
    good = [r for r in wanted if _rewarded(r, min_reward) and not _has_failed_call(r)]
    if not good:
        raise NoDemonstrations(
            f"run {run!r} has no successful rollouts to learn from: {len(records)} succeeded, "
            f"{len(wanted)} of them on these tasks, none with reward >= {min_reward:g} and every call "
            "answered; record some first (tether rollout --upstream URL ... --run NAME)"
        )
    return sorted(good, key=lambda r: (r.rollout.created_at, r.rollout.id))


def _rewarded(record: RolloutRecord, min_reward: float) -> bool:
    rollout = record.rollout
    reward = rollout_final_reward(rollout, record.rewards, rollout.attempt_count or None)
    return reward is not None and reward >= min_reward


def _has_failed_call(record: RolloutRecord) -> bool:
    last = record.rollout.attempt_count or None
    return any(
        span.status == SpanStatus.ERROR or CallAttr.ERROR in span.attributes
        for span in _calls(record)
        if span.attempt is None or span.attempt == last
    )


def _calls(record: RolloutRecord) -> list[Span]:
    calls = [s for s in record.spans if is_call_span(s.name) and s.origin == Origin.GATEWAY]
    return _label_agents(record.spans, calls)


def build_demonstrations(
    records: Sequence[RolloutRecord],
    template: ChatTemplate,
    *,
    merge: bool = True,
    agents: Collection[str] | None = None,
    exclude_agents: Collection[str] = (),
) -> DemonstrationReport:
    """Demonstration transitions from the last attempt's chat calls of the rollouts' records."""
    selected = _AgentFilter(agents, exclude_agents)
    report = DemonstrationReport()
    for record in records:
        rollout = record.rollout
        report.rollouts += 1
        last = _last_attempt(rollout, [])
        reward = rollout_final_reward(rollout, record.rewards, last)
        chains: list[_Chain] = []
        for index, span in enumerate(s for s in _calls(record) if s.attempt in (None, last)):
            report.calls += 1
            call = _rendered_call(span, index, last, selected, template)
            if isinstance(call, str):
                report.skipped[call] += 1
                continue
            if merge and chains and chains[-1].break_reason(call) is None:
                chains[-1].extend(call)
            else:
                chains.append(_Chain.start(call))
        for chain in chains:
            transition = chain.transition(rollout, 0.0 if reward is None else reward, {})
            transition.demonstration = True
            report.transitions.append(transition)
    return report


def _rendered_call(
    span: Span, index: int, attempt: int | None, agents: _AgentFilter, template: ChatTemplate
) -> _Call | str:
    """The call rendered with the policy's template, or why it cannot be."""
    attrs: dict[str, Any] = span.attributes
    if span.status != SpanStatus.OK or CallAttr.ERROR in attrs:
        return "failed_call"
    if not agents.selects(attrs.get(CallAttr.AGENT)):
        return "agent_not_selected"
    request = attrs.get(CallAttr.CHAT_REQUEST) or attrs.get(CallAttr.REQUEST) or {}
    reply = _reply(attrs.get(CallAttr.RESPONSE))
    messages = request.get("messages")
    if attrs.get(CallAttr.CALL) != "chat" or not isinstance(messages, list) or reply is None:
        return "not_a_chat_call"
    tools, tool_choice = request.get("tools"), request.get("tool_choice")
    try:
        prompt_ids = template.prompt_ids(messages, tools, tool_choice)
        response_ids = template.reply_ids(messages, reply, tools, tool_choice)
    except TemplateError:
        return "template_error"
    return _Call(
        span=span,
        index=index,
        attempt=attempt,
        agent=attrs.get(CallAttr.AGENT),
        policy=None,  # another model's call: imitated by the policy its agent maps to
        policy_version=None,
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        logprobs=[0.0] * len(response_ids),
        sampler=RAW,  # no logprobs: imitation scores the trainer's own raw distribution
    )


def _reply(response: Any) -> dict[str, Any] | None:
    """The first choice's assistant message: its content and tool calls."""
    choices = response.get("choices") if isinstance(response, dict) else None
    message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        return None
    reply: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        reply["tool_calls"] = message["tool_calls"]
    return reply
