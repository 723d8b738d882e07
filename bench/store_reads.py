"""Store reads per training step: the trainer's old per-rollout reads against one `read_rollouts`.

    .venv/bin/python -m bench.store_reads [--rollouts 64] [--calls 4] [--repeats 5] [--no-http]

A step is recorded as a real one leaves the store: `--rollouts` finished rollouts in groups of 8, each
with `--calls` model calls made into spans by the gateway's own code (token ids, logprobs, the request),
the agent's tool span after each call, the evaluator's reward and a step reward; the first rollout of
each group is on its second attempt, its first one failed after one call. Then the trainer's reads of
that step, after the runner is done (`_collect`), through a proxy that counts the store's read calls and
the rows they answer, and the SQL statements under them:

- before: per rollout, what `build_transitions` (get_rollout, query_spans, query_rewards) and
  `stage_stats` (list_attempts, query_spans) read: 5 calls per rollout;
- after: one `read_rollouts` of the step's rollouts (a statement per table), made by the driver once
  the last has finished (`RunnerConfig.read_once`, as the trainer runs it) and handed on with their
  outcomes, then `transitions_of` and `stage_stats_of` on the records.
  Before it, the driver also read 2 calls per rollout for the outcomes (query_rewards, query_spans),
  which the "before" counts leave out.

Both paths end in the same functions, whose answers are checked to be equal. Times are medians of
`--repeats` runs, the two paths alternated; in process (SQLite, a WAL file) and over HTTP (the store API
on loopback, in this process).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.adapters.build import TransitionReport, transitions_of
from tether.contracts import Meta
from tether.gateway.context import CallContext
from tether.gateway.spans import call_span
from tether.gateway.upstreams.base import CallRecord, ChoiceRecord
from tether.runner.driver import outcomes_of
from tether.store import Claim, RolloutRequest, RolloutStatus, SQLiteStore, StoreClient, Task
from tether.store.auth import TokenAuthority
from tether.store.base import Store
from tether.store.records import Reward, RolloutRecord, Span
from tether.trainer.stages import stage_stats_of

READS = ("get_rollout", "list_rollouts", "query_spans", "query_rewards", "list_attempts", "read_rollouts")
ALL_ROWS = 1_000_000_000
GROUP = 8
PROMPT_TOKENS, RESPONSE_TOKENS, OBSERVATION_TOKENS = 512, 128, 64

StepAnswer = tuple[TransitionReport, dict[str, Any]]


# -- counting -------------------------------------------------------------------------------------------


class CountingStore:
    """A store whose read calls, and the rows they answer, are counted; other calls pass through."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: Counter[str] = Counter()
        self.rows = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        return self._counted(name, method) if name in READS else method

    def _counted(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            answer = method(*args, **kwargs)
            self.calls[name] += 1
            self.rows += rows_in(answer)
            return answer

        return call


def rows_in(answer: Any) -> int:
    """The store rows an answer holds: a record's rollout, attempts, spans and rewards."""
    if isinstance(answer, RolloutRecord):
        return 1 + len(answer.attempts) + len(answer.spans) + len(answer.rewards)
    if isinstance(answer, list):
        return sum(rows_in(item) for item in answer)
    return 1


@dataclass
class Statements:
    """The SQL statements a SQLite store reads with, counted."""

    count: int = 0

    def watch(self, store: SQLiteStore) -> None:
        read = store.dialect.read

        def counted(sql: str, params: Sequence[Any] = ()) -> Any:
            self.count += 1
            return read(sql, params)

        store.dialect.read = counted  # type: ignore[method-assign]


# -- a recorded step ------------------------------------------------------------------------------------


def token_ids(count: int, offset: int = 0) -> list[int]:
    return [1000 + (offset + n) % 30_000 for n in range(count)]


def model_call(claim: Claim, prompt: list[int], started: float) -> tuple[Span, list[int]]:
    """One chat call's span, as the gateway makes it, and the response's token ids."""
    response = token_ids(RESPONSE_TOKENS, len(prompt))
    text = "word " * RESPONSE_TOKENS
    body = {"model": "policy", "messages": [{"role": "user", "content": "word " * len(prompt)}]}
    record = CallRecord(
        response={"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]},
        choices=[ChoiceRecord(0, text, "stop", response, [-0.5] * len(response))],
        prompt_token_ids=prompt,
        usage={"prompt_tokens": len(prompt), "completion_tokens": len(response)},
        policy_version=1,
    )
    context = CallContext(rollout_id=claim.rollout.id, attempt=claim.attempt.number, agent=None)
    return call_span(context, "chat", body, "policy", started, record), response


def attempt_spans(claim: Claim, calls: int) -> list[Span]:
    """An agent's conversation: each call's prompt is the last one, its answer and a tool's output."""
    spans: list[Span] = []
    prompt = token_ids(PROMPT_TOKENS)
    for _ in range(calls):
        span, response = model_call(claim, prompt, time.time())
        tool = Span(
            rollout_id=claim.rollout.id,
            attempt=claim.attempt.number,
            name="tool.run",
            start_time=time.time(),
            end_time=time.time(),
        )
        spans += [span, tool]
        prompt = prompt + response + token_ids(OBSERVATION_TOKENS, 7)
    return spans


def finish(store: Store, claim: Claim, calls: int) -> None:
    spans = attempt_spans(claim, calls)
    store.add_spans(spans)
    rollout_id, attempt = claim.rollout.id, claim.attempt.number
    rewards = [
        Reward(rollout_id=rollout_id, attempt=attempt, value=-0.2, source="air", span_id=spans[-1].span_id),
        Reward(rollout_id=rollout_id, attempt=attempt, value=1.0, source="evaluator", primary=True),
    ]
    store.add_rewards(rewards)
    store.update_status(rollout_id, RolloutStatus.succeeded, output="the answer", attempt=attempt)


def record_step(store: Store, rollouts: int, calls: int) -> list[str]:
    """A finished step's rollouts, as the runner, the gateway and the evaluator leave them; their ids."""
    requests = [
        RolloutRequest(
            task=Task(id=f"task-{n // GROUP}", input={"question": f"q{n // GROUP}"}),
            group_id=f"task-{n // GROUP}@step-1",
            sample=n % GROUP,
            max_attempts=2,
            metadata={Meta.STEP: 1},
        )
        for n in range(rollouts)
    ]
    ids = [rollout.id for rollout in store.enqueue(requests)]
    for n in range(rollouts):
        worker = f"bench-host/{os.getpid()}/w-{n % GROUP}"
        claim = store.claim(worker)
        assert claim is not None
        if claim.rollout.sample == 0 and claim.attempt.number == 1:
            store.add_spans(attempt_spans(claim, 1))
            store.update_status(claim.rollout.id, RolloutStatus.failed, error="agent crashed", attempt=1)
            claim = store.claim(worker)
            assert claim is not None
        finish(store, claim, calls)
    return ids


# -- the two paths --------------------------------------------------------------------------------------


def read_per_rollout(store: Store, ids: Sequence[str]) -> tuple[list[RolloutRecord], list[RolloutRecord]]:
    """What the old `build_transitions` and `stage_stats` read, each for itself, one rollout at a time."""
    built = [
        RolloutRecord.model_construct(
            rollout=store.get_rollout(rollout_id),
            attempts=[],
            spans=store.query_spans(rollout_id=rollout_id, limit=ALL_ROWS),
            rewards=store.query_rewards(rollout_id),
        )
        for rollout_id in ids
    ]
    staged = [
        RolloutRecord.model_construct(
            rollout=record.rollout,
            attempts=store.list_attempts(record.rollout.id),
            spans=store.query_spans(rollout_id=record.rollout.id, limit=ALL_ROWS),
            rewards=[],
        )
        for record in built
    ]
    return built, staged


def read_batched(store: Store, ids: Sequence[str]) -> tuple[list[RolloutRecord], list[RolloutRecord]]:
    """The driver's one `read_rollouts` as the rollouts finish (here the whole step at once): the outcomes
    hand their records on, and the trainer reads nothing more."""
    records = [o.record for o in outcomes_of(store.read_rollouts(ids)) if o.record is not None]
    return records, records


Reader = Callable[[Store, Sequence[str]], tuple[list[RolloutRecord], list[RolloutRecord]]]
PATHS: dict[str, Reader] = {"before": read_per_rollout, "after": read_batched}


@dataclass
class PathFigures:
    """One path's counts (the same every run), its times (one per run) and its last answer."""

    calls: Counter[str] = field(default_factory=Counter)
    statements: int = 0
    rows: int = 0
    read_s: list[float] = field(default_factory=list)
    total_s: list[float] = field(default_factory=list)
    answer: StepAnswer | None = None

    @property
    def read_calls(self) -> int:
        return sum(self.calls.values())


def run_path(
    figures: PathFigures, store: Store, statements: Statements, ids: Sequence[str], read: Reader
) -> None:
    counting, statements_before = CountingStore(store), statements.count
    started = time.perf_counter()
    built, staged = read(counting, ids)
    figures.read_s.append(time.perf_counter() - started)
    figures.answer = (transitions_of(built, merge=True), stage_stats_of(staged))
    figures.total_s.append(time.perf_counter() - started)
    figures.calls, figures.rows = counting.calls, counting.rows
    figures.statements = statements.count - statements_before


def measure(store: Store, statements: Statements, ids: Sequence[str], repeats: int) -> dict[str, PathFigures]:
    """Each path `repeats` times, alternated so both see the same machine; their answers must agree."""
    figures = {name: PathFigures() for name in PATHS}
    for _ in range(repeats):
        for name, read in PATHS.items():
            run_path(figures[name], store, statements, ids, read)
    if figures["before"].answer != figures["after"].answer:
        raise AssertionError(
            "the batched read gave other transitions or stage stats than the per-rollout reads"
        )
    return figures


@contextmanager
def backends(folder: Path, http: bool) -> Iterator[list[tuple[str, Store, Statements]]]:
    """The stores to measure, each with the counter of its SQL statements."""
    from tether.gateway.server import BackgroundServer
    from tether.store.server import create_store_app

    store = SQLiteStore(folder / "step.db")
    statements = Statements()
    statements.watch(store)
    local: list[tuple[str, Store, Statements]] = [("SQLite, in process", store, statements)]
    try:
        if not http:
            yield local
            return
        auth = TokenAuthority.generate()
        with (
            BackgroundServer(create_store_app(store, auth)) as url,
            StoreClient(url, auth.admin_token) as client,
        ):
            yield [*local, ("over HTTP (loopback)", client, statements)]
    finally:
        store.close()


# -- the table ------------------------------------------------------------------------------------------


@dataclass
class Result:
    where: str
    before: PathFigures
    after: PathFigures


def run(rollouts: int, calls: int, repeats: int, http: bool) -> list[Result]:
    with (
        tempfile.TemporaryDirectory(prefix="tether-bench-") as folder,
        backends(Path(folder), http) as stores,
    ):
        ids = record_step(stores[0][1], rollouts, calls)
        return [
            Result(where, figures["before"], figures["after"])
            for where, store, statements in stores
            for figures in [measure(store, statements, ids, repeats)]
        ]


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def render(results: list[Result], rollouts: int, calls: int) -> str:
    lines = [
        f"| step of {rollouts} rollouts, {calls} calls each | store | read calls | per rollout | "
        "SQL statements | rows read | reads (median) | reads + transitions + stats |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for label, path in (
            ("before: per-rollout reads", result.before),
            ("after: read_rollouts", result.after),
        ):
            lines.append(
                f"| {label} | {result.where} | {path.read_calls} | {path.read_calls / rollouts:.2f} | "
                f"{path.statements} | "
                f"{path.rows} | {_ms(path.read_s):.1f} ms | {_ms(path.total_s):.1f} ms |"
            )
        before, after = result.before, result.after
        ratios = (
            f"{before.read_calls / after.read_calls:.0f}x",
            "",
            f"{before.statements / after.statements:.0f}x",
            f"{before.rows / after.rows:.1f}x",
            f"{_ms(before.read_s) / _ms(after.read_s):.1f}x",
            f"{_ms(before.total_s) / _ms(after.total_s):.1f}x",
        )
        lines.append(f"| ratio (before / after) | {result.where} | {' | '.join(ratios)} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=64, help="rollouts in the step")
    parser.add_argument("--calls", type=int, default=4, help="model calls per rollout")
    parser.add_argument("--repeats", type=int, default=5, help="runs of each path; times are medians")
    parser.add_argument(
        "--http", action=argparse.BooleanOptionalAction, default=True, help="measure over HTTP too"
    )
    args = parser.parse_args()
    results = run(args.rollouts, args.calls, args.repeats, args.http)
    print(render(results, args.rollouts, args.calls))
    print("\nread calls by method:")
    for result in results:
        for label, path in (("before", result.before), ("after", result.after)):
            counts = ", ".join(f"{name} {count}" for name, count in sorted(path.calls.items()))
            print(f"  {result.where}, {label}: {counts}")


if __name__ == "__main__":
    main()
