"""bench/store_reads.py on a small step: the counts it reports, and that both paths agree."""

from __future__ import annotations

from bench import store_reads


def test_a_step_is_read_in_one_call_instead_of_five_per_rollout() -> None:
    rollouts = 10  # one group of 8, and 2 of the next: two rollouts on their second attempt

    results = store_reads.run(rollouts, calls=2, repeats=1, http=True)

    assert [r.where for r in results] == ["SQLite, in process", "over HTTP (loopback)"]
    for result in results:
        before, after = result.before, result.after
        assert before.calls == {
            "get_rollout": 10,
            "query_spans": 20,
            "query_rewards": 10,
            "list_attempts": 10,
        }
        assert after.calls == {"read_rollouts": 1} and (before.statements, after.statements) == (50, 4)
        assert before.answer == after.answer and after.answer is not None  # measure() checks it too
        report, stats = after.answer
        assert len(report.transitions) == rollouts and stats["nodes.bench-host.rollouts"] == rollouts
    table = store_reads.render(results, rollouts, 2)
    assert "| ratio (before / after) | over HTTP (loopback) | 50x |" in table
