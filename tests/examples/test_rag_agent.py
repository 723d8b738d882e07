"""The rag_agent example: its reward, its MiniLM retrieval over the corpus, and the real OpenAI Agents SDK
agent driven by `tether rollout` (the built-in engine with the tiny model, and a scripted upstream that
makes the tool call a tiny model never makes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.examples.support import Example, Finished, run_rollouts, script_task_files, scripted_upstream
from tests.integration.scripted_upstream import call_tool, say
from tether.runner.tasks import load_tasks

RAG = Example("rag_agent")
EXAMPLE = RAG.dir
AGENT = RAG.agent()
REWARD = RAG.reward("score")
load = RAG.load


def questions() -> list[dict]:
    return [json.loads(line) for line in (EXAMPLE / "questions.jsonl").read_text().splitlines()]


def answer(question: dict) -> str:
    """A question's gold answer: under `reference`, the evaluator's only."""
    return str(question["reference"]["answer"])


def passage_of(question: dict) -> str:
    return str(question["reference"]["passage"])


# --- data and reward ----------------------------------------------------------------------------------


def test_the_question_file_is_a_valid_task_file_whose_passages_exist() -> None:
    tasks = load_tasks(EXAMPLE / "questions.jsonl")
    corpus = {p.id for p in load("retrieval").load_corpus()}
    assert len(tasks) >= 40 and 30 <= len(corpus) <= 160
    assert all(set(task.input) == {"question", "reference"} and task.input["question"] for task in tasks)
    assert all(answer(task.input) for task in tasks)
    assert {passage_of(task.input) for task in tasks} <= corpus


def test_each_question_has_its_own_passage_and_answer_and_the_answer_is_in_it() -> None:
    reward = load("reward")
    corpus = {p.id: p for p in load("retrieval").load_corpus()}
    qs = questions()
    assert len({passage_of(q) for q in qs}) == len(qs)
    assert len({" ".join(reward.normalize(answer(q))) for q in qs}) == len(qs)
    assert len({" ".join(reward.normalize(q["question"])) for q in qs}) == len(qs)
    assert len({p.text for p in corpus.values()}) == len(corpus)
    for q in qs:
        passage = corpus[passage_of(q)]
        text = set(reward.normalize(f"{passage.title} {passage.text}"))
        assert set(reward.normalize(answer(q))) <= text, q


def test_the_pipelines_held_out_questions_are_held_out_by_content(tmp_path: Path) -> None:
    """The split `pipeline.sh` writes: at least 50 held-out questions (one is at most 2 points) and 100
    training ones, and no question, answer or passage on both sides."""
    reward = load("reward")
    train_file, val_file = script_task_files(EXAMPLE / "pipeline.sh", tmp_path / "data")
    train, val = load_tasks(train_file), load_tasks(val_file)
    assert len(val) >= 50 and len(train) >= 100
    corpus = {p.id: p.text for p in load("retrieval").load_corpus()}

    def content(tasks: list, field: str) -> set[str]:
        if field == "passage":
            return {corpus[passage_of(t.input)] for t in tasks}
        texts = [answer(t.input) if field == "answer" else t.input[field] for t in tasks]
        return {" ".join(reward.normalize(text)) for text in texts}

    for field in ("question", "answer", "passage"):
        assert content(train, field).isdisjoint(content(val, field)), field
    assert {t.id for t in train}.isdisjoint(t.id for t in val)


@pytest.mark.parametrize(
    ("output", "gold", "expected"),
    [
        ("Answer: Alexander Fleming", "Alexander Fleming", {"format": 1.0, "f1": 1.0, "reward": 1.0}),
        ("answer: the Louvre.", "the Louvre", {"format": 1.0, "f1": 1.0, "reward": 1.0}),
        ("Answer: Fleming", "Alexander Fleming", {"format": 1.0, "f1": 2 / 3, "reward": 0.2 + 0.8 * 2 / 3}),
        ("Answer: Paris", "Bonn", {"format": 1.0, "f1": 0.0, "reward": 0.2}),
        (
            "It was Alexander Fleming",
            "Alexander Fleming",
            {"format": 0.0, "f1": 2 / 3, "reward": 0.8 * 2 / 3},
        ),
        ("I do not know", "Bonn", {"format": 0.0, "f1": 0.0, "reward": 0.0}),
        (None, "Bonn", {"format": 0.0, "f1": 0.0, "reward": 0.0}),
        ("Answer:", "Bonn", {"format": 1.0, "f1": 0.0, "reward": 0.2}),
    ],
)
def test_reward_scores_format_and_token_f1(output: str | None, gold: str, expected: dict) -> None:
    assert load("reward").score({"reference": {"answer": gold}}, output) == pytest.approx(expected)


def test_normalisation_drops_case_punctuation_and_articles() -> None:
    reward = load("reward")
    assert reward.normalize("The Atlantic, and a PACIFIC ocean!") == ["atlantic", "and", "pacific", "ocean"]
    assert reward.token_f1("the Atlantic and Pacific oceans", "Atlantic and Pacific oceans") == 1.0
    assert reward.token_f1("the", "a") == 1.0  # both empty after normalisation


def test_the_reward_is_the_primary_of_the_dict_through_the_runner() -> None:
    from tether.runner.rewards import evaluate, load_callable

    task = {"question": "Where was Beethoven born?", "reference": {"answer": "Bonn"}}
    rewards, _ = evaluate(load_callable(REWARD), "r1", 1, task, "Answer: Bonn", [])
    assert {r.name: (r.value, r.primary) for r in rewards} == {
        "reward": (1.0, True),
        "format": (1.0, False),
        "f1": (1.0, False),
    }


def test_the_agent_prints_the_last_answer_line_or_the_reply_on_one_line() -> None:
    agent = load("agent")
    assert agent.final_line("Let me see.\nAnswer: Bonn\n") == "Answer: Bonn"
    assert agent.final_line("**Answer:** Bonn, Germany") == "Answer: Bonn, Germany"
    assert agent.final_line("Answer: x\nanswer: Bonn") == "Answer: Bonn"
    assert agent.final_line("Bonn\nin Germany") == "Bonn in Germany"


# --- retrieval (the real all-MiniLM-L6-v2) -------------------------------------------------------------


@pytest.fixture(scope="module")
def retriever(tmp_path_factory: pytest.TempPathFactory) -> object:
    return load("retrieval").Retriever(cache_dir=tmp_path_factory.mktemp("rag-cache"))


def test_embeddings_are_unit_length_and_similar_texts_score_higher(retriever: object) -> None:
    vectors = retriever.embedder.embed(["a dog runs in the park", "a puppy is running outside", "tax law"])
    assert vectors.shape == (3, 384)
    assert [round(float(v @ v), 4) for v in vectors] == [1.0, 1.0, 1.0]
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


@pytest.mark.parametrize("question_id", ["q14", "q21", "q39", "q41"])
def test_search_returns_the_passage_that_answers_the_question(retriever: object, question_id: str) -> None:
    question = next(q for q in questions() if q["id"] == question_id)
    hits = retriever.search(question["question"], k=3)
    assert len(hits) == 3 and hits[0].passage.id == passage_of(question)
    assert hits[0].score > hits[1].score >= hits[2].score


def test_every_question_finds_its_passage_as_the_top_hit(retriever: object) -> None:
    misses = [q["id"] for q in questions() if retriever.search(q["question"])[0].passage.id != passage_of(q)]
    assert misses == []


def test_corpus_embeddings_are_cached_and_reused(tmp_path: Path, retriever: object) -> None:
    retrieval = load("retrieval")
    first = retrieval.Retriever(cache_dir=tmp_path, embedder=retriever.embedder)
    cached = list(tmp_path.glob("corpus-*.npy"))
    assert len(cached) == 1
    stamp = cached[0].stat().st_mtime_ns
    second = retrieval.Retriever(cache_dir=tmp_path, embedder=retriever.embedder)
    assert cached[0].stat().st_mtime_ns == stamp and (first.matrix == second.matrix).all()
    cached[0].write_bytes(b"not an array")  # a damaged cache is embedded again and replaced
    third = retrieval.Retriever(cache_dir=tmp_path, embedder=retriever.embedder)
    assert np.allclose(third.matrix, first.matrix, atol=1e-5) and np.allclose(
        np.load(cached[0]), third.matrix
    )
    assert list(tmp_path.iterdir()) == cached  # no temporary files left behind


def test_an_empty_query_finds_nothing_and_says_so(retriever: object) -> None:
    assert retriever.search("   ") == []
    assert load("retrieval").format_hits([]) == "No passages found."


# --- the real agent through `tether rollout` -----------------------------------------------------------


def rag_rollouts(project: Path, tasks: list[dict], *args: str) -> list[Finished]:
    cache = {"RAG_AGENT_CACHE": str(project / "cache")}  # keep the source tree clean
    return run_rollouts(project, AGENT, REWARD, tasks, *args, env=cache)


def test_rollouts_of_the_real_agent_on_the_built_in_engine(tmp_path: Path) -> None:
    for done in rag_rollouts(tmp_path, questions()[:2], "--model", "tiny-random", "--n-workers", "2"):
        assert {"reward", "format", "f1"} <= set(done.reward_values)
        done.assert_first_call_asks(["search"])


def test_the_search_tool_runs_when_the_model_calls_it(tmp_path: Path) -> None:
    task = next(q for q in questions() if q["id"] == "q14")
    turns = call_tool("search", query="who discovered penicillin"), say("Answer: Alexander Fleming")
    with scripted_upstream(*turns) as upstream:
        [done] = rag_rollouts(tmp_path, [task], *upstream.rollout_args, "--n-workers", "1")
    assert done.rollout.output == "Answer: Alexander Fleming"
    assert done.reward_values["reward"] == 1.0 and done.reward_values["format"] == 1.0
    assert len(done.chat_calls) == 2
    tool_messages = [m for m in upstream.script.requests[1]["messages"] if m["role"] == "tool"]
    assert len(tool_messages) == 1 and tool_messages[0]["content"].startswith("[p14] Penicillin:")
