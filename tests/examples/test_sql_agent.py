"""The sql_agent example: the Chinook database, its gold queries, the execution-match reward, the Spider
loader, and the real LangGraph agent driven by `tether rollout` against the built-in engine."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from tests.examples.support import Example, run_rollouts, script_task_files
from tether.runner.tasks import load_tasks
from tether.store import Task

SQL = Example("sql_agent")
EXAMPLE = SQL.dir
SLOW_QUERY = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000000000) "
    "SELECT COUNT(*) FROM n"
)


load = SQL.load


@pytest.fixture(scope="module")
def chinook_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return load("chinook").database_path(tmp_path_factory.mktemp("chinook"))


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    return load("tasks").load_questions()


def count(db: Path, table: str) -> int:
    with sqlite3.connect(db) as connection:
        return connection.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


# --- the database -------------------------------------------------------------------------------------


def test_chinook_has_every_fixture_record_with_foreign_keys_as_id_columns(chinook_db: Path) -> None:
    chinook = load("chinook")
    records = json.loads(chinook.find_fixture().read_text())
    per_model = Counter(record["model"].rpartition(".")[2] for record in records)
    assert set(per_model) >= {"album", "artist", "track", "invoice", "invoiceline", "customer", "employee"}
    for model, expected in per_model.items():
        assert count(chinook_db, model) == expected
    with sqlite3.connect(chinook_db) as db:
        keys = {(row[3], row[2]) for row in db.execute("SELECT * FROM pragma_foreign_key_list('track')")}
        title = db.execute("SELECT album.title FROM album JOIN artist ON artist.id = album.artist_id LIMIT 1")
        first = title.fetchone()
        hired = db.execute("SELECT hiredate FROM employee WHERE id = 1").fetchone()[0]
    assert keys == {("album_id", "album"), ("mediatype_id", "mediatype"), ("genre_id", "genre")}
    assert first is not None
    assert hired == "2002-08-14 00:00:00"  # fixture datetimes become SQLite's own format


def test_chinook_is_built_once_and_then_reused(tmp_path: Path) -> None:
    chinook = load("chinook")
    path = chinook.database_path(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE marker (x)")
    assert chinook.database_path(tmp_path) == path
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'marker'").fetchone()[0] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["chinook.sqlite"]  # no temporary file left behind


# --- the question set ---------------------------------------------------------------------------------


def test_question_set_is_graded_and_every_gold_query_returns_rows(
    chinook_db: Path, questions: list[dict]
) -> None:
    reward = load("reward")
    assert len(questions) >= 40
    assert len({q["id"] for q in questions}) == len(questions)
    assert Counter(q["difficulty"] for q in questions).keys() == {"easy", "medium", "hard", "extra"}
    for question in questions:
        rows = reward.execute(str(chinook_db), question["gold_sql"])
        assert rows, question
        assert rows[0] not in {(0,), (None,)}, question
        task = {"db": str(chinook_db), "reference": {"gold_sql": question["gold_sql"]}}
        assert reward.execution_match(task, question["gold_sql"]) == 1.0, question


def test_the_templated_questions_are_what_the_generator_writes(tmp_path: Path, questions: list[dict]) -> None:
    """The question file's last 93 are `more_questions.py`'s output from the first 188: seeded, and each
    with a result no other question has (checked by execution as it writes them)."""
    first = tmp_path / "questions.jsonl"
    first.write_text("".join(json.dumps(q) + "\n" for q in questions[:188]))
    command = [sys.executable, "more_questions.py", "--per-template", "20", "--out", str(first)]
    subprocess.run(command, cwd=EXAMPLE, check=True, capture_output=True, timeout=300)
    written = [json.loads(line) for line in first.read_text().splitlines()]
    assert written == questions and len(questions) - 188 == 93
    reward = load("reward")
    db = str(load("chinook").database_path(None))
    results = [frozenset(Counter(reward.execute(db, q["gold_sql"])).items()) for q in questions[188:]]
    assert len(set(results)) == 93


def test_task_files_split_every_level_and_load_as_tether_tasks(
    chinook_db: Path, questions: list[dict], tmp_path: Path
) -> None:
    tasks = load("tasks")
    train, val = tasks.split(tasks.chinook_tasks(chinook_db, questions), 0.25, seed=3)
    assert tasks.split(tasks.chinook_tasks(chinook_db, questions), 0.25, seed=3) == (train, val)
    assert len(train) + len(val) == len(questions)
    assert {t["id"] for t in train}.isdisjoint(t["id"] for t in val)
    assert {t["difficulty"] for t in val} == {"easy", "medium", "hard", "extra"}
    tasks.write(tmp_path / "val.jsonl", val)
    loaded = load_tasks(tmp_path / "val.jsonl")
    assert [t.id for t in loaded] == [t["id"] for t in val]
    assert loaded[0].input["db"] == str(chinook_db.resolve())
    assert set(loaded[0].input) >= {"question", "reference", "db"} and "gold_sql" not in loaded[0].input
    assert loaded[0].input["reference"] == {"gold_sql": questions_by_id(questions)[loaded[0].id]["gold_sql"]}


def questions_by_id(questions: list[dict]) -> dict[str, dict]:
    return {question["id"]: question for question in questions}


def gold(task: Task) -> str:
    """A task's gold query: the evaluator's only, under `reference`."""
    return str(task.input["reference"]["gold_sql"])


def normalised(text: str) -> str:
    return " ".join(re.findall(r"\w+|[^\w\s]", text.lower()))


def test_the_pipelines_held_out_questions_are_held_out_by_content(chinook_db: Path, tmp_path: Path) -> None:
    """The split `pipeline.sh` writes: at least 50 held-out easy/medium questions (one is at most 2 points)
    and 100 training ones, no
    question or gold query on both sides, and no training question's gold query a right answer to a
    held-out one (its rows are not the held-out gold's rows)."""
    reward = load("reward")
    train_file, val_file = script_task_files(EXAMPLE / "pipeline.sh", tmp_path / "data")
    train, val = load_tasks(train_file), load_tasks(val_file)
    assert len(val) >= 50 and len(train) >= 100
    assert {t.input["difficulty"] for t in val} == {"easy", "medium"}
    assert len({t.input["difficulty"] for t in val[:20]}) == 2  # mixed, so the first N are a fair sample
    assert {t.id for t in train}.isdisjoint(t.id for t in val)
    assert {normalised(t.input["question"]) for t in train}.isdisjoint(
        normalised(t.input["question"]) for t in val
    )
    assert {normalised(gold(t)) for t in train}.isdisjoint(normalised(gold(t)) for t in val)
    rows = {t.id: reward.execute(str(chinook_db), gold(t)) for t in [*train, *val]}
    for held in val:
        ordered = reward.ORDER_BY.search(gold(held)) is not None
        answered = [t.id for t in train if reward.same_result(rows[t.id], rows[held.id], ordered)]
        assert answered == [], (held.id, answered)


def test_a_held_out_question_whose_answer_a_training_query_gives_moves_to_train() -> None:
    tasks = load("tasks")
    questions = [{"id": f"q{i}", "difficulty": "easy"} for i in range(10)]
    answers = {f"q{i}": i % 5 for i in range(10)}  # q0 and q5 share an answer, q1 and q6, ...
    train, val = tasks.split(questions, 0.5, seed=0, answers=answers)
    assert len(train) + len(val) == 10
    assert {answers[t["id"]] for t in train}.isdisjoint(answers[t["id"]] for t in val)
    train, val = tasks.split([*questions, {"id": "h", "difficulty": "hard"}], 0.5, 0, val_levels={"easy"})
    assert "h" in {t["id"] for t in train} and len(val) == 5  # a level not held out goes to train whole


# --- the reward ---------------------------------------------------------------------------------------


@pytest.fixture
def task(chinook_db: Path) -> dict:
    return {
        "question": "How many artists are there?",
        "db": str(chinook_db),
        "reference": {"gold_sql": "SELECT COUNT(*) FROM artist"},
    }


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("SELECT COUNT(*) FROM artist", 1.0),
        ("select count(id) from artist;", 1.0),
        ("```sql\nSELECT COUNT(name) + 0 FROM artist\n```", 1.0),
        ("Here it is: ```SELECT COUNT(*) FROM artist```", 1.0),
        ("SELECT COUNT(*) FROM album", 0.0),
        ("SELECT COUNT(*), 1 FROM artist", 0.0),
        ("SELECT COUNT(*) FROM artists", 0.0),  # no such table
        ("SELEC COUNT(*) FROM artist", 0.0),  # does not parse
        ("SELECT 1; SELECT 2", 0.0),  # two statements
        ("", 0.0),
        (None, 0.0),
    ],
)
def test_execution_match(task: dict, output: str | None, expected: float) -> None:
    assert load("reward").execution_match(task, output) == expected


def test_order_matters_only_when_the_gold_orders(chinook_db: Path) -> None:
    reward = load("reward")
    ordered = {"db": str(chinook_db), "reference": {"gold_sql": "SELECT name FROM genre ORDER BY name"}}
    unordered = {"db": str(chinook_db), "reference": {"gold_sql": "SELECT name FROM genre"}}
    reversed_names = "SELECT name FROM genre ORDER BY name DESC"
    assert reward.execution_match(ordered, reversed_names) == 0.0
    assert reward.execution_match(ordered, "SELECT name FROM genre ORDER BY 1") == 1.0
    assert reward.execution_match(unordered, reversed_names) == 1.0
    assert reward.execution_match(unordered, "SELECT DISTINCT name FROM genre WHERE id > 1") == 0.0


def test_duplicates_count(chinook_db: Path) -> None:
    reward = load("reward")
    task = {"db": str(chinook_db), "reference": {"gold_sql": "SELECT country FROM customer"}}
    assert reward.execution_match(task, "SELECT country FROM customer ORDER BY country") == 1.0
    assert reward.execution_match(task, "SELECT DISTINCT country FROM customer") == 0.0


def test_predictions_cannot_write_and_slow_ones_are_cut_off(chinook_db: Path) -> None:
    reward = load("reward")
    task = {"db": str(chinook_db), "reference": {"gold_sql": "SELECT COUNT(*) FROM artist"}}
    assert reward.execution_match(task, "DELETE FROM artist") == 0.0
    assert count(chinook_db, "artist") == 275
    with pytest.raises(reward.QueryError, match="interrupted"):
        reward.execute(str(chinook_db), SLOW_QUERY, time_limit_s=0.05)


def test_a_broken_gold_query_is_an_error_not_a_zero(chinook_db: Path) -> None:
    reward = load("reward")
    with pytest.raises(reward.QueryError, match="no such table"):
        reward.execution_match(
            {"db": str(chinook_db), "reference": {"gold_sql": "SELECT * FROM nope"}}, "SELECT 1"
        )


# --- the Spider loader --------------------------------------------------------------------------------


def make_spider(root: Path) -> None:
    for db_id, rows in {
        "concert": [("Rock Fest", 2014), ("Jazz Night", 2015)],
        "pets": [("cat",), ("dog",)],
    }.items():
        folder = root / "database" / db_id
        folder.mkdir(parents=True)
        with sqlite3.connect(folder / f"{db_id}.sqlite") as db:
            if db_id == "concert":
                db.execute("CREATE TABLE concert (name TEXT, year INTEGER)")
                db.executemany("INSERT INTO concert VALUES (?, ?)", rows)
            else:
                db.execute("CREATE TABLE pet (kind TEXT)")
                db.executemany("INSERT INTO pet VALUES (?)", rows)
    dev = [
        {
            "db_id": "concert",
            "question": "How many concerts are there?",
            "query": "SELECT count(*) FROM concert",
        },
        {
            "db_id": "pets",
            "question": "List all pet kinds.",
            "query": "SELECT kind FROM pet",
            "query_toks": [],
        },
    ]
    train = [
        {
            "db_id": "concert",
            "question": f"Concerts after {y}?",
            "query": f"SELECT name FROM concert WHERE year > {y}",
        }
        for y in (2000, 2014, 2020)
    ]
    (root / "dev.json").write_text(json.dumps(dev))
    (root / "train_spider.json").write_text(json.dumps(train))


def test_spider_loader_points_each_task_at_its_database(tmp_path: Path) -> None:
    tasks, reward = load("tasks"), load("reward")
    make_spider(tmp_path / "spider")
    dev = tasks.load_spider(tmp_path / "spider", "val")
    assert [t["db_id"] for t in dev] == ["concert", "pets"]
    assert dev[0]["db"] == str((tmp_path / "spider/database/concert/concert.sqlite").resolve())
    assert dev[0]["question"] == "How many concerts are there?"
    assert reward.execution_match(dev[0], "SELECT COUNT(name) FROM concert") == 1.0
    assert reward.execution_match(dev[1], "SELECT kind FROM pet WHERE kind = 'cat'") == 0.0
    assert len(tasks.load_spider(tmp_path / "spider", "train", limit=2)) == 2


def test_spider_command_writes_train_and_val_files(tmp_path: Path) -> None:
    make_spider(tmp_path / "spider")
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE / "tasks.py"),
            "--spider",
            str(tmp_path / "spider"),
            "--out-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [gold(t) for t in load_tasks(tmp_path / "data/val.jsonl")] == [
        "SELECT count(*) FROM concert",
        "SELECT kind FROM pet",
    ]
    assert len(load_tasks(tmp_path / "data/train.jsonl")) == 3


def test_spider_loader_names_what_is_missing(tmp_path: Path) -> None:
    tasks = load("tasks")
    with pytest.raises(tasks.SpiderError, match="neither train_spider.json nor dev.json"):
        tasks.spider_files(tmp_path, tmp_path / "out", None)
    make_spider(tmp_path / "spider")
    (tmp_path / "spider/database/pets/pets.sqlite").unlink()
    with pytest.raises(tasks.SpiderError, match=r"example 1: no database file .*pets\.sqlite"):
        tasks.load_spider(tmp_path / "spider", "val")
    (tmp_path / "spider/dev.json").write_text('[{"db_id": "concert"}]')
    with pytest.raises(tasks.SpiderError, match="example 0 lacks db_id, question or query"):
        tasks.load_spider(tmp_path / "spider", "val")


# --- the agent ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "sql"),
    [
        ("```sql\nSELECT name\nFROM genre;\n```", "SELECT name FROM genre"),
        ("The query is SELECT COUNT(*) FROM artist; it counts rows.", "SELECT COUNT(*) FROM artist"),
        ("with t as (select 1) select * from t", "with t as (select 1) select * from t"),
        ("I don't know", "I don't know"),
    ],
)
def test_agent_extracts_the_query_from_a_reply(reply: str, sql: str) -> None:
    assert load("agent").extract_sql(reply) == sql


def test_agent_shows_the_schema_with_foreign_keys_and_checks_results(chinook_db: Path) -> None:
    agent = load("agent")
    schema = agent.describe_schema(str(chinook_db))
    assert "album(id, title, artist_id -> artist.id)" in schema.splitlines()
    assert agent.run_sql(str(chinook_db), "SELECT COUNT(*) FROM artist") == "1 row(s)\n(275,)"
    assert agent.run_sql(str(chinook_db), "SELECT * FROM nope").startswith("error: no such table")
    assert agent.is_correct("CORRECT") and not agent.is_correct("WRONG: not correct")
    assert not agent.is_correct("Incorrect: wrong table") and not agent.is_correct("")


def test_rollout_of_the_real_agent_records_each_role_and_a_reward(
    chinook_db: Path, questions: list[dict], tmp_path: Path
) -> None:
    tasks = load("tasks").chinook_tasks(chinook_db, questions[:2])
    agent = SQL.agent("--max-turns", "1", "--max-tokens", "24")
    args = ("--model", "tiny-random", "--n-workers", "2", "--sandbox-show", str(chinook_db))  # the database
    for done in run_rollouts(tmp_path, agent, SQL.reward("execution_match"), tasks, *args, timeout=300):
        calls = [s for s in done.spans if s.name.startswith("llm")]
        agents = [c.attributes.get("agent") for c in calls]
        assert agents[:2] == ["writer", "checker"]
        assert set(agents) <= {"writer", "checker", "rewriter"}
        assert len(calls) <= 4  # write, check, and at most one rewrite and check
        if "rewriter" in agents:
            assert agents == ["writer", "checker", "rewriter", "checker"]
        primary = [r for r in done.rewards if r.primary]
        assert len(primary) == 1
        assert primary[0].source == "evaluator" and primary[0].value in (0.0, 1.0)
