"""A text-to-SQL agent in LangGraph with three model roles: writer -> checker -> rewriter -> checker ...

The writer writes a SQLite query for the question, given the database's schema. The checker sees the query
and what it returned on the database (or the error) and answers CORRECT or WRONG with a reason; on WRONG
the rewriter writes a new query and the checker looks again, up to --max-turns rewrites. The last query is
printed on one line. It is an ordinary langchain-openai script: the endpoint and key come from
OPENAI_BASE_URL and OPENAI_API_KEY, and each role asks for its own model name (writer, checker, rewriter),
so a gateway can tell the roles apart and serve or train each one differently.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... python agent.py --db chinook.sqlite "How many artists are there?"

Run by Tether, the task comes as JSON in TETHER_TASK: {"question": ..., "db": ...}.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sqlite3
import time
from typing import Any, Literal, TypedDict

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

ROLES = ("writer", "checker", "rewriter")
PREVIEW_ROWS = 5
TIME_LIMIT_S = 5.0
FENCE = re.compile(r"```[ \t]*(?:sqlite|sql)?[ \t]*\n?(.*?)(?:```|$)", re.IGNORECASE | re.DOTALL)
STATEMENT = re.compile(r"\b(?:select\b|with\s+\w+\s+as\s*\()[^;]*", re.IGNORECASE | re.DOTALL)
WRONG = re.compile(r"\b(?:wrong|incorrect|not correct)\b", re.IGNORECASE)
RIGHT = re.compile(r"\bcorrect\b", re.IGNORECASE)

WRITER = (
    "You write SQLite queries. Given a database schema and a question, reply with one SQL query that "
    "answers it, inside a ```sql code block, and nothing else."
)
CHECKER = (
    "You check SQLite queries. Given a question, the schema, a query and what the query returned, decide "
    "whether the query answers the question. Reply with CORRECT, or with WRONG followed by a one-line reason."
)
REWRITER = (
    "You fix SQLite queries. Given a question, the schema, a query, what it returned and a reviewer's "
    "comment, reply with one corrected SQL query inside a ```sql code block, and nothing else."
)


class State(TypedDict, total=False):
    question: str
    schema: str
    db: str
    sql: str
    result: str
    verdict: str
    correct: bool
    rewrites: int


def describe_schema(db_path: str) -> str:
    """One line per table: `track(id, name, album_id -> album.id, ...)`."""
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        query = (
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
        tables = [row[0] for row in db.execute(query)]
        lines = []
        for table in tables:
            references = {
                row[3]: f"{row[2]}.{row[4] or 'id'}"
                for row in db.execute("SELECT * FROM pragma_foreign_key_list(?)", (table,))
            }
            columns = [
                f"{row[1]} -> {references[row[1]]}" if row[1] in references else row[1]
                for row in db.execute("SELECT * FROM pragma_table_info(?)", (table,))
            ]
            lines.append(f"{table}({', '.join(columns)})")
    return "\n".join(lines)


def extract_sql(text: str) -> str:
    """The query in a model's reply: a fenced block, else the first SELECT/WITH statement, on one line."""
    match = FENCE.search(text)
    candidate = match.group(1) if match else text
    statement = STATEMENT.search(candidate)
    sql = statement.group(0) if statement else candidate
    return " ".join(sql.split()).rstrip(";").strip()


def run_sql(db_path: str, sql: str) -> str:
    """What the checker sees: the first rows and how many there were, or the error."""
    if not sql:
        return "error: empty query"
    deadline = time.monotonic() + TIME_LIMIT_S
    with contextlib.closing(sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)) as db:
        db.set_progress_handler(lambda: int(time.monotonic() > deadline), 10_000)
        try:
            rows = db.execute(sql).fetchall()
        except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError) as exc:
            return f"error: {exc}"
    shown = "\n".join(repr(row) for row in rows[:PREVIEW_ROWS])
    more = f"\n... ({len(rows) - PREVIEW_ROWS} more)" if len(rows) > PREVIEW_ROWS else ""
    return f"{len(rows)} row(s)\n{shown}{more}"


def is_correct(verdict: str) -> bool:
    return RIGHT.search(verdict) is not None and WRONG.search(verdict) is None


class SQLAgent:
    def __init__(self, models: dict[str, str], max_turns: int, max_tokens: int) -> None:
        base_url, api_key = os.environ.get("OPENAI_BASE_URL"), os.environ.get("OPENAI_API_KEY")
        self.llms = {
            role: ChatOpenAI(
                model=models[role],
                base_url=base_url,
                api_key=api_key,
                temperature=0.0 if role == "checker" else 0.7,
                max_tokens=max_tokens // 3 if role == "checker" else max_tokens,
                max_retries=2,
            )
            for role in ROLES
        }
        self.max_turns = max_turns
        self.graph = self._build()

    def _ask(self, role: str, system: str, user: str) -> str:
        reply = self.llms[role].invoke([SystemMessage(system), HumanMessage(user)])
        return reply.content if isinstance(reply.content, str) else str(reply.content)

    def write(self, state: State) -> State:
        text = self._ask("writer", WRITER, f"Schema:\n{state['schema']}\n\nQuestion: {state['question']}")
        return {"sql": extract_sql(text), "rewrites": 0}

    def check(self, state: State) -> State:
        result = run_sql(state["db"], state["sql"])
        user = (
            f"Schema:\n{state['schema']}\n\nQuestion: {state['question']}\n\n"
            f"Query: {state['sql'] or '(empty)'}\n\nResult: {result}"
        )
        verdict = self._ask("checker", CHECKER, user)
        return {"result": result, "verdict": verdict, "correct": is_correct(verdict)}

    def rewrite(self, state: State) -> State:
        user = (
            f"Schema:\n{state['schema']}\n\nQuestion: {state['question']}\n\n"
            f"Query: {state['sql'] or '(empty)'}\n\nResult: {state['result']}\n\n"
            f"Reviewer: {state['verdict'].strip()}"
        )
        text = self._ask("rewriter", REWRITER, user)
        return {"sql": extract_sql(text) or state["sql"], "rewrites": state["rewrites"] + 1}

    def after_check(self, state: State) -> Literal["rewrite", "__end__"]:
        return END if state["correct"] or state["rewrites"] >= self.max_turns else "rewrite"

    def _build(self) -> Any:
        graph = StateGraph(State)
        graph.add_node("write", self.write)
        graph.add_node("check", self.check)
        graph.add_node("rewrite", self.rewrite)
        graph.add_edge(START, "write")
        graph.add_edge("write", "check")
        graph.add_conditional_edges("check", self.after_check)
        graph.add_edge("rewrite", "check")
        return graph.compile()

    def solve(self, question: str, db_path: str) -> str:
        state: State = {"question": question, "db": db_path, "schema": describe_schema(db_path)}
        final = self.graph.invoke(state, {"recursion_limit": 4 * self.max_turns + 10})
        return final["sql"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("question", nargs="*", help="the question (default: TETHER_TASK's)")
    parser.add_argument("--db", help="SQLite database file (default: TETHER_TASK's)")
    parser.add_argument("--max-turns", type=int, default=2, help="rewrites after the first query")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens per writer/rewriter reply")
    parser.add_argument(
        "--model", help="one model name for all three roles (default: writer/checker/rewriter)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    task = json.loads(os.environ.get("TETHER_TASK") or "{}")
    question = " ".join(args.question) or task.get("question")
    db_path = args.db or task.get("db")
    if not question or not db_path:
        raise SystemExit("give a question and --db, or a TETHER_TASK with 'question' and 'db'")
    if not os.path.isfile(db_path):
        raise SystemExit(f"no such database file: {db_path}")
    models = {role: args.model or role for role in ROLES}
    agent = SQLAgent(models, max(0, args.max_turns), args.max_tokens)
    print(agent.solve(question, db_path))


if __name__ == "__main__":
    main()
