"""`tether optimize-prompt` end to end: the example agent (unchanged) against a scripted policy endpoint,
a scripted optimizer endpoint whose calls go through the gateway, and a real project store."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.prompt_search import scripted
from tether.cli.main import main
from tether.store import RolloutStatus, SQLiteStore

AGENT_SYSTEM = "You are a helpful assistant. Answer with one word."
MATH = "You know math. Answer with one word."
BOTH = "You know math and geography. Answer with one word."


def _args(tmp_path: Path, policy_url: str, optimizer_url: str, *extra: str) -> list[str]:
    return [
        "optimize-prompt",
        "--agent",
        f"{sys.executable} {scripted.EXAMPLE / 'agent.py'}",
        "--tasks",
        str(scripted.EXAMPLE / "train.jsonl"),
        "--val-tasks",
        str(scripted.EXAMPLE / "val.jsonl"),
        "--reward",
        f"{scripted.EXAMPLE / 'reward.py'}:correct",
        "--upstream",
        policy_url,
        "--optimizer-endpoint",
        optimizer_url,
        "--optimizer-model",
        "scripted-optimizer",
        "--project-dir",
        str(tmp_path),
        "--out",
        str(tmp_path / "best_prompt.txt"),
        *extra,
    ]


def test_optimize_prompt_improves_the_example_agent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = scripted.Policy()
    optimizer = scripted.Optimizer(["Name the subjects.", scripted.prompt(MATH), scripted.prompt(BOTH)])
    with scripted.serve(policy) as policy_url, scripted.serve(optimizer) as optimizer_url:
        code = main(
            _args(tmp_path, policy_url, optimizer_url, "--rounds", "1", "--beam-width", "1", "--budget", "30")
        )
    assert code == 0
    assert (tmp_path / "best_prompt.txt").read_text() == BOTH + "\n"
    out = capsys.readouterr().out
    assert "validation score: initial 0.000 -> best 1.000 (c2)" in out
    # 1 baseline + 4 initial + 4 training + 4 + 4 validation
    assert "spent 17 of 30 rollouts, 3 optimizer calls" in out
    assert "prompt search (apo)" in out and "c1" in out

    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    try:
        latest = store.get_resource("system")
        assert latest.value["text"] == BOTH and latest.value["best"] is True and latest.version == 4
        assert store.get_resource("system", 3).value["parents"] == ["c0"]
        rollouts = store.list_rollouts(limit=1000)
        agent_rollouts = [r for r in rollouts if r.mode == "prompt-search"]
        assert len(agent_rollouts) == 17
        # The optimizer's calls: recorded under their own rollout, labelled, closed as no training data.
        (session,) = [r for r in rollouts if r.input.get("purpose") == "prompt-optimizer"]
        assert session.status == RolloutStatus.cancelled and session.mode == "optimizer"
        spans = store.query_spans(rollout_id=session.id, name="llm.chat")
        assert len(spans) == 3 and {s.attributes["agent"] for s in spans} == {"optimizer"}
        assert {r["model"] for r in optimizer.requests} == {"scripted-optimizer"}
    finally:
        store.close()


def test_a_failing_agent_scores_zero_and_stays_in_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failing = tmp_path / "failing.py"
    failing.write_text("import sys\nsys.exit(3)\n")
    policy = scripted.Policy()
    optimizer = scripted.Optimizer(["It crashed.", scripted.prompt(MATH)])
    with scripted.serve(policy) as policy_url, scripted.serve(optimizer) as optimizer_url:
        args = _args(tmp_path, policy_url, optimizer_url, "--rounds", "1", "--branch-factor", "1")
        args[2] = f"{sys.executable} {failing}"
        code = main(
            [*args, "--initial-prompt", str(_write(tmp_path / "p.txt", "Start.\n")), "--budget", "11"]
        )
    assert code == 0
    out = capsys.readouterr().out
    assert "validation score: initial 0.000 -> best 0.000 (c0)" in out
    # 4 validation + 4 training; the child's validation needs 4 of the 3 left, so it never starts.
    assert "spent 8 of 11 rollouts" in out
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    try:
        assert store.get_resource("system", 2).value["reason"] == "no budget left to score it"
        failed = [r for r in store.list_rollouts(limit=100) if r.mode == "prompt-search"]
        assert len(failed) == 8 and {r.status for r in failed} == {RolloutStatus.failed}
    finally:
        store.close()
    assert (tmp_path / "best_prompt.txt").read_text() == "Start.\n"


def test_bad_options_exit_with_a_message(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="must be at least 1"):
        main(_args(tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", "--beam-width", "0"))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.smollm2
def test_smollm2_as_policy_and_optimizer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The built-in engine serves SmolLM2 to the agent and, through the gateway, to the optimizer."""
    args = _args(tmp_path, "", "policy")
    upstream = args.index("--upstream")
    del args[upstream : upstream + 2]
    del args[args.index("--optimizer-model") : args.index("--optimizer-model") + 2]
    settings = ["--model", "smollm2-135m", "--rounds", "1", "--beam-width", "1", "--branch-factor", "1"]
    settings += [
        "--batch-size",
        "1",
        "--val-batch-size",
        "2",
        "--budget",
        "5",
        "--optimizer-max-tokens",
        "96",
    ]
    prompt = _write(tmp_path / "p.txt", "You are a helpful assistant. Answer with one word.")
    assert main([*args, *settings, "--initial-prompt", str(prompt)]) == 0
    out = capsys.readouterr().out
    # 2 validation + 1 training + 2 validation for the one rewrite (or 3 if the rewrite was rejected).
    assert re.search(r"spent [35] of 5 rollouts, 2 optimizer calls", out), out
    assert (tmp_path / "best_prompt.txt").read_text().strip()
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    try:
        (session,) = [r for r in store.list_rollouts() if r.input.get("purpose") == "prompt-optimizer"]
        spans = store.query_spans(rollout_id=session.id, name="llm.chat")
        assert len(spans) == 2 and all(s.attributes["agent"] == "optimizer" for s in spans)
        assert all(s.attributes["prompt_token_ids"] for s in spans)
    finally:
        store.close()
