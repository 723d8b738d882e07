"""Turn a rollout's recorded model calls into transitions: token ids, logprobs, loss masks and rewards.

Only token ids recorded by the gateway are used; text is never re-tokenized, because a re-tokenization is
not what the policy saw or sampled.

Which calls: the LLM-call spans (names starting with `llm.`) that the gateway recorded itself (origin
`gateway`; a call span an agent sent is kept in the store but never trained on) of a rollout, in store
insertion order, of its last attempt (`attempts="all"` keeps every attempt; a call span with no attempt
number counts as the last attempt's). With `agents`, a call whose `agent` attribute is not selected is
skipped.

Final reward: the rule of `tether.store.reward_rule` (the last recorded primary reward that is not linked
to a span, of the transition's attempt or of no attempt, named `reward_name` when given), so training
uses exactly the reward that metrics and validation report. Without one the reward is 0.0 and the
rollout counts in `rollouts_without_reward`.

Step rewards: a reward linked to an LLM-call span goes to that call; one linked to another span (a tool span)
goes to the last successful LLM call of the same attempt that started before that span started. The
transition holding the call sums them. Unlinked non-primary rewards are not used, and a step reward whose
call is skipped (another agent, no token ids) is dropped with it. `reward_name` filters only the final
reward.

Merging (`merge=True`): consecutive selected calls of one attempt and one agent become one transition while
the next call's prompt starts with exactly the sequence so far (prompt + every response token). The extra
prompt tokens (tool output, the next user turn, chat-template tokens) join the response with loss mask 0
and logprob 0.0. A failed call does not break a chain (the agent usually retries the same prompt); any
other call that cannot extend it does, counted in `merge_breaks` by reason (a call sampled with other
parameters too: a transition is scored under one distribution; `reasoning_dropped` when the chain's last
answer began with thinking that the next prompt no longer holds). Each response token carries the version
of the call that generated it (`response_versions`); a merged transition's `policy_version` is the lowest
of them (the most off-policy one), ignoring unknown ones.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tether.adapters.transitions import Transition
from tether.contracts import (
    AGENT_NAME_ATTRIBUTES,
    AgentSource,
    CallAttr,
    Meta,
    Origin,
    SpanStatus,
    is_call_span,
)
from tether.sampling import Sampler
from tether.store.records import Reward, Rollout, RolloutRecord, Span
from tether.store.reward_rule import agent_rewards_count, final_reward

ALL_ROWS = 1_000_000_000

Attempts = Literal["last", "all"]


@dataclass
class TransitionReport:
    """What `build_transitions` made, and why some calls did not become (or extend) transitions."""

    transitions: list[Transition] = field(default_factory=list)
    rollouts: int = 0
    calls: int = 0
    merged: int = 0
    merge_breaks: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    rollouts_without_reward: int = 0
    calls_by_agent: Counter[str] = field(default_factory=Counter)
    # Per call (span id): "started" (it began a transition), "merged" (it extended the one before), or
    # why it became none (a `skipped` reason); and where a chain broke, the reason, at the breaking call.
    call_outcomes: dict[str, str] = field(default_factory=dict)
    break_reasons: dict[str, str] = field(default_factory=dict)

    @property
    def trained_tokens(self) -> int:
        return sum(t.trained_tokens for t in self.transitions)

    def summary(self) -> str:
        parts = [
            f"{len(self.transitions)} transitions ({self.trained_tokens} trained tokens) "
            f"from {self.calls} LLM calls in {self.rollouts} rollouts; {self.merged} calls merged"
        ]
        if self.merge_breaks:
            parts.append(f"merge chains broken: {_counts(self.merge_breaks)}")
        if self.skipped:
            parts.append(f"calls skipped: {_counts(self.skipped)}")
        if self.rollouts_without_reward:
            parts.append(f"{self.rollouts_without_reward} rollouts had no final reward (given 0.0)")
        return "; ".join(parts) + "."


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{reason} {count}" for reason, count in counter.most_common())


@dataclass
class _Call:
    span: Span
    index: int
    attempt: int | None
    agent: str | None
    policy: str | None  # the upstream that generated it: the policy whose adapter sampled it
    policy_version: int | None
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    sampler: Sampler
    thought: bool = False  # its answer began with the model's thinking


@dataclass
class _Chain:
    first: _Call
    response_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    span_ids: list[str]
    token_versions: list[int | None]
    thought: bool = False  # its last call's answer began with thinking

    @classmethod
    def start(cls, call: _Call) -> _Chain:
        return cls(
            first=call,
            response_ids=list(call.response_ids),
            logprobs=list(call.logprobs),
            loss_mask=[1] * len(call.response_ids),
            span_ids=[call.span.span_id],
            token_versions=[call.policy_version] * len(call.response_ids),
            thought=call.thought,
        )

    def sequence_length(self) -> int:
        return len(self.first.prompt_ids) + len(self.response_ids)

    def break_reason(self, call: _Call) -> str | None:
        if call.agent != self.first.agent:
            return "agent_changed"
        if call.policy != self.first.policy:
            return "policy_changed"  # one transition trains one policy
        if call.attempt != self.first.attempt:
            return "attempt_changed"
        if call.sampler != self.first.sampler:
            return "sampling_changed"  # one transition is scored under one distribution
        if call.prompt_ids[: self.sequence_length()] != self.first.prompt_ids + self.response_ids:
            # A template that leaves out earlier turns' thinking (Qwen3's does) renders the conversation
            # again without it: the next prompt cannot extend a sequence that holds it.
            return "reasoning_dropped" if self.thought else "prefix_mismatch"
        return None

    def extend(self, call: _Call) -> None:
        observation = call.prompt_ids[self.sequence_length() :]
        self.response_ids += observation + call.response_ids
        self.logprobs += [0.0] * len(observation) + call.logprobs
        self.loss_mask += [0] * len(observation) + [1] * len(call.response_ids)
        self.span_ids.append(call.span.span_id)
        self.token_versions += [None] * len(observation) + [call.policy_version] * len(call.response_ids)
        self.thought = call.thought

    def transition(self, rollout: Rollout, reward: float, step_rewards: dict[str, float]) -> Transition:
        known = [version for version in self.token_versions if version is not None]
        return Transition(
            rollout_id=rollout.id,
            task_id=rollout.task_id,
            group_id=rollout.group_id,
            attempt=self.first.attempt,
            call_index=self.first.index,
            agent=self.first.agent,
            policy=self.first.policy,
            policy_version=min(known) if known else None,
            prompt_ids=list(self.first.prompt_ids),
            response_ids=self.response_ids,
            response_logprobs=self.logprobs,
            loss_mask=self.loss_mask,
            reward=reward,
            step_reward=sum(step_rewards.get(span_id, 0.0) for span_id in self.span_ids),
            span_ids=self.span_ids,
            mode=rollout.mode,
            sampler=self.first.sampler,
            response_versions=self.token_versions if known else [],
        )


class RecordReader(Protocol):
    """Where records come from (a `Store` has it): the adapters read nothing else."""

    def read_rollouts(self, rollout_ids: Sequence[str]) -> list[RolloutRecord]: ...


def build_transitions(
    store: RecordReader,
    rollouts: Iterable[Rollout | str],
    *,
    merge: bool = False,
    agents: Collection[str] | None = None,
    exclude_agents: Collection[str] = (),
    reward_name: str | None = None,
    attempts: Attempts = "last",
    choice: int = 0,
) -> TransitionReport:
    """`transitions_of` the rollouts (objects or ids), read in one `Store.read_rollouts`. A rollout given
    as an object is taken as given, the store's only for its attempts, spans and rewards."""
    given = list(rollouts)
    records = store.read_rollouts([item if isinstance(item, str) else item.id for item in given])
    as_given = [
        record if isinstance(item, str) else record.model_copy(update={"rollout": item})
        for item, record in zip(given, records, strict=True)
    ]
    return transitions_of(
        as_given,
        merge=merge,
        agents=agents,
        exclude_agents=exclude_agents,
        reward_name=reward_name,
        attempts=attempts,
        choice=choice,
    )


def transitions_of(
    records: Iterable[RolloutRecord],
    *,
    merge: bool = False,
    agents: Collection[str] | None = None,
    exclude_agents: Collection[str] = (),
    reward_name: str | None = None,
    attempts: Attempts = "last",
    choice: int = 0,
) -> TransitionReport:
    """Build transitions from the recorded calls of rollouts; see the module docstring. Reads no store.

    `agents` keeps only those agents' calls; `exclude_agents` drops those (e.g. agents served by a fixed
    model). Either way the skipped calls are counted as `agent_not_selected`."""
    if attempts not in ("last", "all"):
        raise ValueError(f"attempts must be 'last' or 'all', not {attempts!r}")
    selected = _AgentFilter(agents, exclude_agents)
    report = TransitionReport()
    for record in records:
        _build_rollout(
            record,
            report,
            merge=merge,
            agents=selected,
            reward_name=reward_name,
            attempts=attempts,
            choice=choice,
        )
    return report


def _build_rollout(
    record: RolloutRecord,
    report: TransitionReport,
    *,
    merge: bool,
    agents: _AgentFilter,
    reward_name: str | None,
    attempts: Attempts,
    choice: int,
) -> None:
    rollout, spans, rewards = record.rollout, record.spans, record.rewards
    report.rollouts += 1
    if not agent_rewards_count(rollout):
        rewards = [reward for reward in rewards if reward.source != Origin.AGENT]
    calls = [span for span in spans if is_call_span(span.name) and span.origin == Origin.GATEWAY]
    if rollout.metadata.get(Meta.DEMONSTRATION):
        # Another model's text: a demonstration for supervised training (tether.adapters.demonstrations),
        # never an RL sample, even where that model reported token ids.
        report.calls += len(calls)
        report.skipped["demonstration"] += len(calls)
        return
    forged = sum(is_call_span(span.name) and span.origin != Origin.GATEWAY for span in spans)
    if forged:
        report.calls += forged
        report.skipped["not_recorded_by_the_gateway"] += forged
    calls = _label_agents(spans, calls)
    last = _last_attempt(rollout, calls)
    by_attempt = _group_by_attempt(calls, last)
    step_rewards = _step_rewards(rewards, spans, calls, last)
    kept = sorted({*by_attempt, last}, key=_attempt_order) if attempts == "all" else [last]
    for attempt, attempt_calls in by_attempt.items():
        if attempt not in kept:
            report.calls += len(attempt_calls)
            report.skipped["earlier_attempt"] += len(attempt_calls)
    finals = {attempt: final_reward(rewards, attempt, reward_name) for attempt in kept}
    if any(final is None for final in finals.values()):
        report.rollouts_without_reward += 1
    ordered = [(attempt, by_attempt.get(attempt, [])) for attempt in kept]
    for chain in _chains(ordered, report, merge=merge, agents=agents, choice=choice):
        reward = finals[chain.first.attempt]
        report.transitions.append(chain.transition(rollout, 0.0 if reward is None else reward, step_rewards))


@dataclass(frozen=True)
class _AgentFilter:
    include: Collection[str] | None
    exclude: Collection[str]

    def __post_init__(self) -> None:
        object.__setattr__(self, "include", None if self.include is None else frozenset(self.include))
        object.__setattr__(self, "exclude", frozenset(self.exclude))

    def selects(self, agent: str | None) -> bool:
        return agent not in self.exclude and (self.include is None or agent in self.include)


def _label_agents(spans: Sequence[Span], calls: Sequence[Span]) -> list[Span]:
    """The calls, each naming its agent (a relabelled call is a copy). An agent that says who it is (the
    X-Tether-Agent header) is believed; otherwise an enclosing OpenTelemetry span that names an agent (the
    call carried its `traceparent`) wins over the model alias the call asked for."""
    by_id = {span.span_id: span for span in spans}
    return [_labelled(call, by_id) for call in calls]


def _labelled(call: Span, by_id: dict[str, Span]) -> Span:
    attrs = call.attributes
    if attrs.get(CallAttr.AGENT_SOURCE) == AgentSource.HEADER:
        return call
    name = _enclosing_agent(call, by_id)
    if name is None:
        return call
    labels = {CallAttr.AGENT: name, CallAttr.AGENT_SOURCE: AgentSource.TRACE}
    return call.model_copy(update={"attributes": {**attrs, **labels}})


def _enclosing_agent(call: Span, by_id: dict[str, Span]) -> str | None:
    seen: set[str] = set()
    parent_id = call.parent_id
    while parent_id is not None and parent_id not in seen:
        seen.add(parent_id)
        parent = by_id.get(parent_id)
        if parent is None:
            return None
        for key in AGENT_NAME_ATTRIBUTES:
            value = parent.attributes.get(key)
            if isinstance(value, str) and value:
                return value
        parent_id = parent.parent_id
    return None


def _attempt_order(attempt: int | None) -> int:
    return -1 if attempt is None else attempt


def _last_attempt(rollout: Rollout, calls: Sequence[Span]) -> int | None:
    if rollout.attempt_count:
        return rollout.attempt_count
    numbers = [span.attempt for span in calls if span.attempt is not None]
    return max(numbers) if numbers else None


def _group_by_attempt(calls: Sequence[Span], last: int | None) -> dict[int | None, list[Span]]:
    groups: dict[int | None, list[Span]] = defaultdict(list)
    for span in calls:
        groups[_attempt_of(span, last)].append(span)
    return groups


def _attempt_of(span: Span, last: int | None) -> int | None:
    return last if span.attempt is None else span.attempt


def _chains(
    attempts: Sequence[tuple[int | None, Sequence[Span]]],
    report: TransitionReport,
    *,
    merge: bool,
    agents: _AgentFilter,
    choice: int,
) -> list[_Chain]:
    chains: list[_Chain] = []
    open_chain: _Chain | None = None
    for attempt, spans in attempts:
        for index, span in enumerate(spans):
            report.calls += 1
            report.calls_by_agent[str(span.attributes.get(CallAttr.AGENT))] += 1
            call = _read_call(span, index, attempt, agents, choice)
            if isinstance(call, str):
                report.skipped[call] += 1
                report.call_outcomes[span.span_id] = call
                if call != "failed_call" and open_chain is not None:
                    broke = "agent_changed" if call == "agent_not_selected" else call
                    report.merge_breaks[broke] += 1
                    report.break_reasons[span.span_id] = broke
                    open_chain = None
                continue
            if open_chain is not None:
                reason = open_chain.break_reason(call)
                if reason is None:
                    open_chain.extend(call)
                    report.merged += 1
                    report.call_outcomes[span.span_id] = "merged"
                    continue
                report.merge_breaks[reason] += 1
                report.break_reasons[span.span_id] = reason
            report.call_outcomes[span.span_id] = "started"
            chain = _Chain.start(call)
            chains.append(chain)
            open_chain = chain if merge else None
    return chains


def _read_call(span: Span, index: int, attempt: int | None, agents: _AgentFilter, choice: int) -> _Call | str:
    """The call's ids and logprobs, or why it cannot become a transition."""
    attrs: dict[str, Any] = span.attributes
    if span.status == SpanStatus.ERROR or CallAttr.ERROR in attrs:
        return "failed_call"
    if span.status == SpanStatus.ABORTED:
        return "aborted_call"  # the agent never saw the whole answer: no reward speaks for it
    agent = attrs.get(CallAttr.AGENT)
    if not agents.selects(agent):
        return "agent_not_selected"
    if _shows_more_than_text(attrs.get(CallAttr.CHAT_REQUEST) or attrs.get(CallAttr.REQUEST)):
        return "non_text_input"  # its prompt ids stand for an image the learner cannot see
    picked = next((c for c in attrs.get(CallAttr.CHOICES) or [] if c.get("index") == choice), None)
    if picked is None:
        return "no_choices"
    prompt_ids, response_ids = attrs.get(CallAttr.PROMPT_TOKEN_IDS), picked.get("token_ids")
    if prompt_ids is None or response_ids is None:
        return "missing_token_ids"
    logprobs = picked.get("logprobs")
    if logprobs is None:
        return "missing_logprobs"
    if len(logprobs) != len(response_ids):
        return "logprobs_length_mismatch"
    return _Call(
        span=span,
        index=index,
        attempt=attempt,
        agent=agent,
        policy=attrs.get(CallAttr.UPSTREAM),
        policy_version=attrs.get(CallAttr.POLICY_VERSION),
        prompt_ids=[int(t) for t in prompt_ids],
        response_ids=[int(t) for t in response_ids],
        logprobs=[float(x) for x in logprobs],
        sampler=Sampler.from_attr(attrs.get(CallAttr.SAMPLING)),
        thought=_thought(attrs.get(CallAttr.RESPONSE), choice),
    )


def _thought(response: Any, choice: int) -> bool:
    """Whether the answer of `choice` gave the agent thinking (`reasoning_content`) apart from its text."""
    choices = response.get("choices") if isinstance(response, dict) else None
    for item in choices or []:
        if isinstance(item, dict) and item.get("index") == choice:
            message = item.get("message") or {}
            return bool(message.get("reasoning_content") or message.get("reasoning"))
    return False


def _shows_more_than_text(request: Any) -> bool:
    """Whether a chat request's messages hold a part other than text (an image, audio, a file)."""
    messages = request.get("messages") if isinstance(request, dict) else None
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if isinstance(part, dict) and part.get("type", "text") != "text":
                return True
    return False


def _step_rewards(
    rewards: Sequence[Reward], spans: Sequence[Span], calls: Sequence[Span], last: int | None
) -> dict[str, float]:
    """Step reward per LLM-call span id."""
    by_id = {span.span_id: span for span in spans}
    call_ids = {span.span_id for span in calls}
    totals: dict[str, float] = defaultdict(float)
    for reward in rewards:
        target = by_id.get(reward.span_id) if reward.span_id is not None else None
        if target is None:
            continue
        owner = target if target.span_id in call_ids else _owner_call(target, calls, last)
        if owner is not None:
            totals[owner.span_id] += reward.value
    return totals


def _owner_call(span: Span, calls: Sequence[Span], last: int | None) -> Span | None:
    """The last successful LLM call of the span's attempt that started before the span did."""
    attempt = _attempt_of(span, last)
    earlier = [
        call
        for call in calls
        if call.status != "error"
        and _attempt_of(call, last) == attempt
        and call.start_time <= span.start_time
    ]
    return max(earlier, key=lambda call: (call.start_time, call.seq or 0), default=None)
