"""What the prompt searches (APO beam search, reflective Pareto search) share.

- `Budget`: agent rollouts, granted before they start, so a search never starts one past its budget.
- `OptimizerLLM`: the optimizer model, any OpenAI-compatible chat endpoint.
- `CandidateRunner`: runs the agent on tasks with a candidate prompt. The candidate reaches the agent
  through the rollout's metadata: `prompt_override` (the gateway rewrites the agent's system message,
  no agent code change) and `prompt_candidate` (what `tether.get_prompt` returns). A rollout that
  crashed, timed out or got no reward scores 0.
- `SearchContext`: the run's bookkeeping: candidate ids, the fixed validation subset, scoring, and the
  history (each candidate one version of the prompt resource, with its score and parents).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import re
import statistics
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from tether.contracts import LLM_CHAT_SPAN, CallAttr, Meta, agent_task
from tether.gateway.prompts import SYSTEM_ROLES, PromptOverride, marked_span, system_text
from tether.prompts import PROMPT_CANDIDATE, PROMPT_KIND
from tether.runner import Runner
from tether.store.base import Store
from tether.store.records import RolloutRequest, RolloutStatus, Span, Task

SEARCH_MODE = "prompt-search"  # the mode of the agent rollouts a search runs
OPTIMIZER_AGENT = "optimizer"  # the X-Tether-Agent label of the optimizer's own calls
PLACEHOLDER = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_]*)\}(?!\})")
NEW_PROMPT = re.compile(r"<new_prompt>(.*?)</new_prompt>", re.DOTALL)
TRACE_CHARS = 1200


class SearchError(RuntimeError):
    """A search that cannot go on (e.g. the optimizer endpoint failed); the message says why."""


# -- text helpers -------------------------------------------------------------------------------------


def placeholders(text: str) -> set[str]:
    """The `{name}` placeholders of a template (`{{` escapes are not placeholders)."""
    return set(PLACEHOLDER.findall(text))


def lost_placeholders(original: str, rewritten: str) -> list[str]:
    return sorted(placeholders(original) - placeholders(rewritten))


def extract_prompt(answer: str) -> str:
    """The new prompt in an optimizer answer: inside the last <new_prompt> tags, else the whole answer."""
    found = NEW_PROMPT.findall(answer)
    text = (found[-1] if found else answer).strip()
    if text.startswith("```") and text.endswith("```"):
        text = text.strip("`").split("\n", 1)[-1] if "\n" in text else text.strip("`")
    return text.strip()


# -- budget -------------------------------------------------------------------------------------------


@dataclass
class Budget:
    total: int
    spent: int = 0

    def __post_init__(self) -> None:
        if self.total < 1:
            raise ValueError("the rollout budget must be at least 1")

    @property
    def remaining(self) -> int:
        return self.total - self.spent

    def can_afford(self, count: int) -> bool:
        return count <= self.remaining

    def take(self, count: int) -> int:
        """Grant up to `count` rollouts now; what is granted counts as spent."""
        granted = max(0, min(count, self.remaining))
        self.spent += granted
        return granted


# -- optimizer model ----------------------------------------------------------------------------------


@dataclass
class OptimizerLLM:
    """An OpenAI-compatible chat endpoint (`base_url` ends in /v1). Calls through the gateway carry the
    agent label `optimizer`, so they are recorded and can be told apart from the agent's."""

    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.7
    max_tokens: int = 1024
    timeout_s: float = 300.0
    headers: dict[str, str] = field(default_factory=lambda: {"X-Tether-Agent": OPTIMIZER_AGENT})
    calls: int = 0

    async def complete(self, system: str, user: str) -> str:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        headers = dict(self.headers)
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = f"{self.base_url.rstrip('/')}/chat/completions"
        self.calls += 1
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise SearchError(f"the optimizer endpoint {url} failed: {exc}") from exc
        if response.status_code != 200:
            raise SearchError(
                f"the optimizer endpoint {url} answered HTTP {response.status_code}: {response.text[:300]}"
            )
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise SearchError(
                f"the optimizer endpoint {url} gave no chat answer: {response.text[:300]}"
            ) from None
        return content if isinstance(content, str) else ""


# -- candidates and traces ----------------------------------------------------------------------------


@dataclass
class Candidate:
    id: str
    text: str
    origin: str  # initial | rewrite | reflection | merge
    parents: list[str] = field(default_factory=list)
    round: int = 0
    scores: dict[str, float] = field(default_factory=dict)  # validation task id -> reward
    status: str = "new"  # new | scored | rejected
    reason: str | None = None
    critique: str | None = None
    spent_after: int = 0  # rollouts spent when it was settled
    version: int | None = None  # its version of the prompt resource

    @property
    def score(self) -> float | None:
        return statistics.fmean(self.scores.values()) if self.scores else None


@dataclass
class Trace:
    """One agent rollout, as the optimizer sees it."""

    task: dict[str, Any]
    reward: float
    status: str
    output: str | None
    error: str | None
    calls: list[dict[str, Any]]  # {"messages": [...], "answer": str}
    rollout_id: str = ""
    system_prompt: str | None = None  # of its first call, as the model got it

    def render(self, limit: int = TRACE_CHARS) -> str:
        lines = [f"task: {_compact(self.task)}", f"reward: {self.reward:g} ({self.status})"]
        if self.error:
            lines.append(f"error: {self.error}")
        for call in self.calls[-2:]:
            asked = [m for m in call["messages"] if isinstance(m, dict) and m.get("role") not in SYSTEM_ROLES]
            if asked:
                lines.append(f"last input: {_compact(system_text(asked[-1]) or '')}")
            lines.append(f"model answer: {_compact(call['answer'])}")
        lines.append(f"final output: {self.output!r}")
        text = "\n".join(lines)
        return text if len(text) <= limit else text[: limit - 3] + "..."


def _compact(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return " ".join(text.split())[:400]


def _calls(spans: Sequence[Span]) -> list[dict[str, Any]]:
    calls = []
    for span in spans:
        if span.name != LLM_CHAT_SPAN or span.attributes.get(CallAttr.AGENT) == OPTIMIZER_AGENT:
            continue
        request = span.attributes.get(CallAttr.REQUEST) or {}
        choices = span.attributes.get(CallAttr.CHOICES) or [{}]
        calls.append({"messages": request.get("messages") or [], "answer": choices[0].get("text") or ""})
    return calls


def first_system_prompt(spans: Sequence[Span]) -> str | None:
    """The system (or developer) message of the first recorded chat call."""
    for span in sorted(spans, key=lambda s: (s.start_time, s.seq or 0)):
        if span.name != LLM_CHAT_SPAN:
            continue
        for message in (span.attributes.get(CallAttr.REQUEST) or {}).get("messages") or []:
            if isinstance(message, dict) and message.get("role") in SYSTEM_ROLES:
                return system_text(message)
        return None
    return None


# -- running the agent with a candidate ----------------------------------------------------------------


@dataclass
class CandidateRunner:
    store: Store
    runner: Runner
    budget: Budget
    prompt_name: str = "system"
    override_mode: str = "replace"  # replace | marked | none (the agent calls tether.get_prompt itself)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    max_attempts: int = 1
    requests_made: int = 0

    def metadata(self, candidate: Candidate | None, purpose: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"prompt_search": {"run": self.run_id, "purpose": purpose}}
        if candidate is None:
            return meta
        meta["prompt_search"]["candidate"] = candidate.id
        meta[PROMPT_CANDIDATE] = {"name": self.prompt_name, "text": candidate.text}
        if self.override_mode != "none":
            meta[Meta.PROMPT_OVERRIDE] = PromptOverride(candidate.text, self.override_mode).to_metadata()  # type: ignore[arg-type]
        return meta

    async def run(
        self, candidate: Candidate | None, tasks: Sequence[Task], purpose: str
    ) -> list[tuple[Task, Trace]]:
        """Run the agent once per task (as many as the budget grants) with this candidate."""
        granted = self.budget.take(len(tasks))
        if granted == 0:
            return []
        chosen = list(tasks[:granted])
        label = candidate.id if candidate is not None else "baseline"
        text = candidate.text if candidate is not None else ""
        requests = [
            RolloutRequest(
                task=task,
                mode=SEARCH_MODE,
                group_id=f"{self.run_id}:{label}:{purpose}",
                max_attempts=self.max_attempts,
                metadata=self.metadata(candidate, purpose),
                key=self._key(text, purpose, task),
            )
            for task in chosen
        ]
        outcomes = await self.runner.run(requests)
        traces = await asyncio.gather(*(self._trace(o.rollout_id, o.reward) for o in outcomes))
        return list(zip(chosen, traces, strict=True))

    def _key(self, text: str, purpose: str, task: Task) -> str:
        """The request's key within the run: its place in the search and what it runs. A re-run of the
        same search reuses a finished rollout only where it asks the very same thing at the same point."""
        self.requests_made += 1
        digest = hashlib.sha256(f"{purpose}\0{text}".encode()).hexdigest()[:12]
        return f"{self.requests_made}:{digest}/{task.id}"

    async def _trace(self, rollout_id: str, outcome_reward: float | None) -> Trace:
        rollout = await asyncio.to_thread(self.store.get_rollout, rollout_id)
        reward = outcome_reward if outcome_reward is not None else 0.0
        if rollout.status != RolloutStatus.succeeded:
            reward = 0.0  # a crash or a timeout scores 0, it is not dropped
        spans = await asyncio.to_thread(
            lambda: self.store.query_spans(rollout_id=rollout_id, attempt=rollout.attempt_count, limit=10_000)
        )
        return Trace(
            agent_task(rollout.input),  # its prompts reach the agent: the optimizer never sees the reference
            float(reward),
            rollout.status.value,
            rollout.output,
            rollout.error,
            _calls(spans),
            rollout_id,
            first_system_prompt(spans),
        )

    async def baseline_prompt(self, task: Task) -> str:
        """The prompt the agent uses on its own: its first call's system message (in `marked` mode, the
        marked span of it), from one rollout without an override."""
        pairs = await self.run(None, [task], "baseline")
        if not pairs:
            raise SearchError("no rollout budget left to read the agent's own prompt")
        text = pairs[0][1].system_prompt
        if text is None:
            raise SearchError(
                "the agent's first model call has no system message to start from: give an initial prompt"
            )
        if self.override_mode == "marked":
            span = marked_span(text)
            if span is None:
                raise SearchError(
                    "override mode 'marked' needs <<prompt>>...<</prompt>> in the agent's system message, "
                    f"which is: {text[:200]!r}"
                )
            return span
        return text


# -- the search's bookkeeping -------------------------------------------------------------------------


@dataclass
class SearchResult:
    best: Candidate
    initial: Candidate
    candidates: list[Candidate]
    spent: int
    budget: int
    optimizer_calls: int
    stopped: str

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "round": c.round,
                "candidate": c.id,
                "origin": c.origin,
                "parents": ",".join(c.parents) or "-",
                "score": c.score,
                "status": c.status if c.reason is None else f"{c.status}: {c.reason}",
                "spent": c.spent_after,
            }
            for c in self.candidates
        ]


@dataclass
class SearchContext:
    candidates_runner: CandidateRunner
    optimizer: OptimizerLLM
    train_tasks: Sequence[Task]
    val_tasks: Sequence[Task]
    algorithm: str
    seed: int = 0
    on_candidate: Callable[[Candidate], None] | None = None
    candidates: list[Candidate] = field(default_factory=list)
    rng: random.Random = field(init=False)
    created: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        if not self.train_tasks or not self.val_tasks:
            raise ValueError("a prompt search needs training tasks and validation tasks")

    @property
    def budget(self) -> Budget:
        return self.candidates_runner.budget

    @property
    def store(self) -> Store:
        return self.candidates_runner.store

    def new(self, text: str, origin: str, parents: Sequence[str] = (), round: int = 0) -> Candidate:
        self.created += 1
        return Candidate(f"c{self.created - 1}", text, origin, list(parents), round)

    def sample_train(self, size: int) -> list[Task]:
        return self.rng.sample(list(self.train_tasks), min(size, len(self.train_tasks)))

    async def score(self, candidate: Candidate) -> bool:
        """Score on the whole validation subset; False (nothing run) when the budget cannot pay for it."""
        if not self.budget.can_afford(len(self.val_tasks)):
            return False
        pairs = await self.candidates_runner.run(candidate, self.val_tasks, "val")
        candidate.scores = {task.id: trace.reward for task, trace in pairs}
        candidate.status = "scored"
        await self.settle(candidate)
        return True

    async def reject(self, candidate: Candidate, reason: str) -> None:
        candidate.status, candidate.reason = "rejected", reason
        await self.settle(candidate)

    async def settle(self, candidate: Candidate) -> None:
        """Record the candidate as a new version of the prompt resource."""
        candidate.spent_after = self.budget.spent
        self.candidates.append(candidate)
        resource = await asyncio.to_thread(
            self.store.put_resource, self.candidates_runner.prompt_name, PROMPT_KIND, self.value(candidate)
        )
        candidate.version = resource.version
        if self.on_candidate is not None:
            self.on_candidate(candidate)

    def value(self, candidate: Candidate, **extra: Any) -> dict[str, Any]:
        return {
            "text": candidate.text,
            "candidate": candidate.id,
            "origin": candidate.origin,
            "parents": candidate.parents,
            "round": candidate.round,
            "score": candidate.score,
            "task_scores": candidate.scores,
            "status": candidate.status,
            "reason": candidate.reason,
            "critique": candidate.critique,
            "rollouts_spent": candidate.spent_after,
            "algorithm": self.algorithm,
            "run": self.candidates_runner.run_id,
            **extra,
        }

    async def check_child(self, child: Candidate, original: str) -> bool:
        """Reject (and record) a rewrite that is empty, a duplicate, or lost a placeholder."""
        if not child.text:
            await self.reject(child, "empty rewrite")
            return False
        lost = lost_placeholders(original, child.text)
        if lost:
            await self.reject(child, "lost placeholder " + ", ".join("{" + name + "}" for name in lost))
            return False
        twin = next((c for c in self.candidates if c.text.strip() == child.text.strip()), None)
        if twin is not None:
            await self.reject(child, f"same text as {twin.id}")
            return False
        return True

    async def finish(self, initial: Candidate, stopped: str) -> SearchResult:
        scored = [c for c in self.candidates if c.status == "scored"]
        # The earliest of the best scores wins a tie, so an unchanged score keeps the initial prompt.
        best = max(scored, key=lambda c: (c.score or 0.0, -self.candidates.index(c)), default=initial)
        await asyncio.to_thread(
            self.store.put_resource,
            self.candidates_runner.prompt_name,
            PROMPT_KIND,
            self.value(best, best=True, status="best", budget=self.budget.total),
        )
        return SearchResult(
            best,
            initial,
            list(self.candidates),
            self.budget.spent,
            self.budget.total,
            self.optimizer.calls,
            stopped,
        )


def render_traces(traces: Sequence[Trace], limit: int = 6) -> str:
    return "\n\n".join(f"### run {i + 1}\n{t.render()}" for i, t in enumerate(traces[:limit]))


async def start(ctx: SearchContext, initial_text: str | None) -> Candidate:
    """The initial candidate, scored unless the budget cannot pay for it (then its status stays new)."""
    if initial_text is None:
        initial_text = await ctx.candidates_runner.baseline_prompt(ctx.train_tasks[0])
    initial = ctx.new(initial_text, "initial")
    await ctx.score(initial)
    return initial


def mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0
