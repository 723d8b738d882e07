"""Where rewards come from: `--reward SPEC`, given once or more.

A SPEC is one of the registered kinds (`register`): `judge:RUBRIC.md` (an LLM judge, `judge.py`),
`judge-rank:RUBRIC.md` (a judge ranking each group of rollouts together, `rank.py`: a `GroupScorer`,
which the trainer applies once a group is done),
`http://...` or `https://...` (a reward-model server, `remote.py`), else a Python evaluator,
`module:function` or `path/to/file.py:function` (`tether.runner.rewards.load_callable`). Every source is
an evaluator to the runner, `(task, output, trace) -> number | {name: number} | Scored`, scored in the
worker's thread while other rollouts run. Several sources are `Combined`: their named rewards together,
and with weights (`--reward-weights format=0.2,judge=0.8`) their weighted sum as the reward `reward`.

Judges and reward servers are shown the model calls the gateway recorded apart from what the agent
reported about itself (`evidence.py`). A Python evaluator gets the whole trace: a span's `origin` says
who recorded it (`gateway`: a call the gateway served; `agent`: anything the agent sent, whatever it
claims), and `tether.rewards.evidence.split_evidence` sorts it the same way.
"""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.registry import Registry
from tether.rewards.judge import Endpoint, Judge
from tether.rewards.rank import GroupJudge, GroupScorer
from tether.rewards.remote import RemoteReward
from tether.runner.rewards import Evaluator, RewardError, Scored, call_evaluator, load_callable
from tether.store.records import Span


@dataclass(frozen=True)
class RewardOptions:
    """What the kinds of source need beyond their SPEC (`--judge-url`, ...)."""

    judge_url: str | None = None
    judge_model: str = "judge"
    judge_key: str = "none"
    timeout_s: float = 60.0
    retries: int = 2


# (the SPEC after "KIND:", options) -> an evaluator of each rollout, or a scorer of a whole group
SourceKind = Callable[[str, RewardOptions], "Evaluator | GroupScorer"]
SOURCE_KINDS: Registry[SourceKind] = Registry("reward source")
register = SOURCE_KINDS.register


def _rubric(kind: str, rubric_file: str, options: RewardOptions) -> tuple[str, Endpoint, str]:
    """A judge's rubric, endpoint and rubric file's absolute path, each checked."""
    path = Path(rubric_file)
    if not path.is_file():
        raise RewardError(f"{kind}: no rubric file {rubric_file!r} (--reward {kind}:RUBRIC.md)")
    if not options.judge_url:
        raise RewardError(f"--reward {kind}:... needs --judge-url URL, an OpenAI-compatible endpoint's /v1")
    rubric = path.read_text()
    if not rubric.strip():
        raise RewardError(f"{kind}: the rubric file {rubric_file!r} is empty")
    endpoint = Endpoint(
        options.judge_url, options.judge_model, options.judge_key, options.timeout_s, options.retries
    )
    return rubric, endpoint, str(path.resolve())


def _remote(url: str, options: RewardOptions) -> Evaluator:
    return RemoteReward(url, options.timeout_s, options.retries)


register("judge", lambda rubric_file, options: Judge(*_rubric("judge", rubric_file, options)))
register("judge-rank", lambda rubric_file, options: GroupJudge(*_rubric("judge-rank", rubric_file, options)))
register("http", lambda rest, options: _remote(f"http:{rest}", options))
register("https", lambda rest, options: _remote(f"https:{rest}", options))


def reward_source(spec: str, options: RewardOptions | None = None) -> Evaluator | GroupScorer:
    kind, sep, rest = spec.partition(":")
    make = SOURCE_KINDS.find(kind) if sep else None
    if make is not None:
        return make(rest, options or RewardOptions())
    return load_callable(spec)


def parse_weights(text: str) -> dict[str, float]:
    """`format=0.2,judge=0.8` -> {"format": 0.2, "judge": 0.8}."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            weight = float(value)
        except ValueError:
            weight = math.nan
        if not sep or not name.strip() or not math.isfinite(weight):
            raise RewardError(f"--reward-weights: expected NAME=NUMBER[,NAME=NUMBER...], got {part!r}")
        weights[name.strip()] = weight
    if not weights:
        raise RewardError("--reward-weights is empty")
    return weights


@dataclass(frozen=True)
class Combined:
    """Several sources' named rewards as one verdict; with `weights`, also `reward`, their weighted sum."""

    parts: Sequence[Evaluator]
    weights: dict[str, float] = field(default_factory=dict)

    def __call__(self, task: dict[str, Any], output: str | None, trace: list[Span]) -> Scored:
        values: dict[str, float] = {}
        spans: list[Span] = []
        for part in self.parts:
            try:
                verdict = call_evaluator(part, task, output, trace)
            except RewardError as exc:
                raise RewardError(str(exc), [*spans, *exc.spans]) from None
            if isinstance(verdict, Scored):
                spans += verdict.spans
                verdict = verdict.values
            named = verdict if isinstance(verdict, dict) else {_name(part): verdict}
            clash = set(named) & set(values)
            if clash:
                raise RewardError(f"two reward sources both give {sorted(clash)}: rename one", spans)
            values.update(named)
        if self.weights:
            missing = sorted(set(self.weights) - set(values))
            if missing:
                raise RewardError(
                    f"--reward-weights names {missing}, not among the rewards {sorted(values)}", spans
                )
            values["reward"] = sum(weight * float(values[name]) for name, weight in self.weights.items())
        return Scored(values, spans)

    def files(self) -> list[str]:
        return [path for part in self.parts for path in evaluator_files(part)]


def _name(part: Evaluator) -> str:
    """A source's reward name when it gives a bare number: its function's name."""
    return str(getattr(part, "__name__", type(part).__name__.lower()))


def split_sources(sources: Sequence[Evaluator | GroupScorer]) -> tuple[list[Evaluator], GroupScorer | None]:
    """Evaluators of each rollout, and the one scorer of whole groups among them, if any."""
    groups = [s for s in sources if isinstance(s, GroupScorer)]
    if len(groups) > 1:
        raise RewardError("at most one --reward may rank whole groups (judge-rank:...)")
    return [s for s in sources if not isinstance(s, GroupScorer)], (groups[0] if groups else None)


def combine(parts: Sequence[Evaluator], weights: dict[str, float] | None) -> Evaluator:
    if len(parts) == 1 and not weights:
        return parts[0]
    return Combined(tuple(parts), dict(weights or {}))


def evaluator_files(evaluator: Evaluator | None) -> list[str]:
    """The files an evaluator reads its code from (hidden from sandboxed agents)."""
    if evaluator is None:
        return []
    files = getattr(evaluator, "files", None)
    if callable(files):
        return list(files())
    try:
        source = inspect.getsourcefile(evaluator)
    except TypeError:  # a builtin, or an instance of a class without a file
        return []
    return [os.path.abspath(source)] if source else []
