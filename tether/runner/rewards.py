"""Rewards the runner computes: an evaluator's verdict, and automatic intermediate rewards (AIR).

An evaluator is any function `(task, output, trace) -> float | dict[str, float]`, named as
`module:function` or `path/to/file.py:function`. It gets the whole task, its `reference` included (the
fields only the evaluator sees: `tether.runner.tasks`); tasks with a reference need an evaluator that
takes the task, checked before anything runs (`check_reference_reader`). AIR rules turn system signals
in the trace (a tool call that errored, a model call cut off by the length limit, output that should be
JSON and is not) into step rewards linked to the span they came from.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tether.contracts import TASK_REFERENCE, Origin, has_reference
from tether.store.records import Reward, Span, Task

if TYPE_CHECKING:
    from typing_extensions import TypeIs  # in typing from Python 3.13

TraceEvaluator = Callable[[dict[str, Any], str | None, list[Span]], Any]
OutputEvaluator = Callable[[dict[str, Any], str | None], Any]
Evaluator = TraceEvaluator | OutputEvaluator


class RewardError(ValueError):
    """An evaluator that cannot be loaded, that failed to score, or that returned something that is not a
    reward; `spans` are what it recorded on the way (a judge's calls), kept with the rollout all the same."""

    def __init__(self, message: str, spans: Sequence[Span] = ()) -> None:
        super().__init__(message)
        self.spans = list(spans)


@dataclass
class Scored:
    """A verdict with the spans of how it was reached (a judge's calls): what reward sources other than a
    plain function return. The runner records the spans with the rollout and attempt they scored."""

    values: dict[str, float]
    spans: list[Span] = field(default_factory=list)


def load_callable(spec: str) -> Callable[..., Any]:
    module_name, sep, attribute = spec.rpartition(":")
    if not sep or not module_name or not attribute:
        raise RewardError(f"expected 'module:function' or 'file.py:function', got {spec!r}")
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.exists():
            raise RewardError(f"no such file: {path}")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        # Registered while it runs, as an import would (a @dataclass looks its module up there), and
        # not after: an unregistered module's functions are pickled by value for Ray workers.
        previous = sys.modules.get(module_spec.name)
        sys.modules[module_spec.name] = module
        try:
            module_spec.loader.exec_module(module)
        finally:
            if previous is None:
                sys.modules.pop(module_spec.name, None)
            else:
                sys.modules[module_spec.name] = previous
    else:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise RewardError(f"cannot import {module_name!r}: {exc}") from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise RewardError(f"{module_name!r} has no function {attribute!r}")
    return function


def _positional_arity(function: Callable[..., Any]) -> float:
    """How many positional arguments `function` takes (inf with *args, or with no signature to read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # some builtins
        return math.inf
    if any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return math.inf
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def _takes_trace(evaluator: Evaluator) -> TypeIs[TraceEvaluator]:
    return _positional_arity(evaluator) >= 3


def takes_task(evaluator: Callable[..., Any]) -> bool:
    """Whether `evaluator(task, output)` passes it the task: it takes two positional arguments or more."""
    return _positional_arity(evaluator) >= 2


def check_reference_reader(evaluator: Callable[..., Any] | None, tasks: Iterable[Task]) -> None:
    """Raise RewardError when a task has a reference that no evaluator would read: there is none, or it
    does not take the task."""
    task = next((task for task in tasks if has_reference(task.input)), None)
    if task is None:
        return
    name = getattr(evaluator, "__qualname__", repr(evaluator))
    if evaluator is None:
        raise RewardError(
            f"task {task.id!r} has a {TASK_REFERENCE!r}, which only an evaluator reads, and no --reward "
            "was given: add --reward MODULE:FUNCTION taking (task, output[, trace])"
        )
    if not takes_task(evaluator):
        raise RewardError(
            f"task {task.id!r} has a {TASK_REFERENCE!r}, but the evaluator {name} does not take the task: "
            "it must take (task, output[, trace]) and read task[" + repr(TASK_REFERENCE) + "]"
        )


def call_evaluator(evaluator: Evaluator, task: dict[str, Any], output: str | None, trace: list[Span]) -> Any:
    if _takes_trace(evaluator):
        return evaluator(task, output, trace)
    return evaluator(task, output)


def evaluate(
    evaluator: Evaluator,
    rollout_id: str,
    attempt: int,
    task: dict[str, Any],
    output: str | None,
    trace: list[Span],
    primary: str | None = None,
) -> tuple[list[Reward], list[Span]]:
    """Run the evaluator and turn its verdict into rewards, exactly one of them primary; with the spans it
    recorded on the way (a `Scored` verdict's: a judge's calls), as the rollout's."""
    verdict = call_evaluator(evaluator, task, output, trace)
    spans: list[Span] = []
    if isinstance(verdict, Scored):
        spans = attributed(verdict.spans, rollout_id, attempt)
        verdict = verdict.values
    if isinstance(verdict, int | float):  # a bool too
        values = {primary or "reward": float(verdict)}
    elif isinstance(verdict, dict) and verdict:
        values = {str(k): v for k, v in verdict.items()}
    else:
        raise RewardError(f"the evaluator returned {verdict!r}; expected a number or a dict of named numbers")
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise RewardError(f"the evaluator's reward {name!r} is {value!r}, not a finite number")
    chosen = primary if primary is not None else ("reward" if "reward" in values else next(iter(values)))
    if chosen not in values:
        raise RewardError(f"the primary reward {chosen!r} is not among the evaluator's {sorted(values)}")
    rewards = [
        Reward(
            rollout_id=rollout_id,
            attempt=attempt,
            name=name,
            value=float(value),
            source="evaluator",
            primary=name == chosen,
        )
        for name, value in values.items()
    ]
    return rewards, spans


def attributed(spans: Sequence[Span], rollout_id: str, attempt: int) -> list[Span]:
    """An evaluator's spans as the rollout's and attempt's."""
    return [span.model_copy(update={"rollout_id": rollout_id, "attempt": attempt}) for span in spans]


@dataclass
class AIRRules:
    """Step rewards from system signals; a rule set to None is off."""

    tool_error: float | None = -0.2
    truncated: float | None = -0.1
    unparsable_json: float | None = -0.2

    @classmethod
    def off(cls) -> AIRRules:
        return cls(None, None, None)


def _is_tool_span(span: Span) -> bool:
    attrs = span.attributes
    return (
        span.name.startswith("tool")
        or "tool.name" in attrs
        or attrs.get("openinference.span.kind") == "TOOL"
        or attrs.get("gen_ai.operation.name") == "execute_tool"
    )


def _wants_json(request: object) -> bool:
    response_format = request.get("response_format") if isinstance(request, dict) else None
    return isinstance(response_format, dict) and response_format.get("type") in ("json_object", "json_schema")


def _parses(text: str) -> bool:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return False
    return True


def _choices(span: Span) -> list[dict[str, Any]]:
    """A call span's choices; those of a span the agent sent may be anything, and only dicts count."""
    choices = span.attributes.get("choices")
    return [c for c in choices if isinstance(c, dict)] if isinstance(choices, list) else []


def air_rewards(spans: Sequence[Span], rules: AIRRules, rollout_id: str, attempt: int) -> list[Reward]:
    rewards = []

    def add(name: str, value: float, span: Span) -> None:
        rewards.append(
            Reward(
                rollout_id=rollout_id,
                attempt=attempt,
                name=f"air:{name}",
                value=value,
                span_id=span.span_id,
                source="air",
                primary=False,
            )
        )

    for span in spans:
        if span.name.startswith("llm."):
            if span.origin != Origin.GATEWAY:  # a call the agent reports itself proves nothing
                continue
            choices = _choices(span)
            if rules.truncated is not None and any(c.get("finish_reason") == "length" for c in choices):
                add("truncated", rules.truncated, span)
            # calls made in another API (Responses, Messages) keep the chat request they became
            request = span.attributes.get("chat_request") or span.attributes.get("request") or {}
            if rules.unparsable_json is not None and _wants_json(request):
                if any(not _parses(c.get("text") or "") for c in choices):
                    add("unparsable_json", rules.unparsable_json, span)
        elif rules.tool_error is not None and _is_tool_span(span) and span.status == "error":
            add("tool_error", rules.tool_error, span)
    return rewards
