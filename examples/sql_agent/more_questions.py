"""More Chinook questions, made from templates over the database's own rows and checked by execution.

    python more_questions.py --per-template 20            # appends to questions.jsonl

Each template is a one-table question (a filter with an aggregate, a listing, or an order with a limit:
`medium`) filled with rows the database holds (albums, artists, countries, cities). A question is kept
only if its gold query returns between 1 and 20 rows, none of them all zero or empty, and a result that
no other question's gold query returns, so a held-out question can never be answered by a training
question's query. The entities are drawn in a seeded order: the same command writes the same questions.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from pathlib import Path
from typing import Any

from tasks import QUESTIONS, chinook_module, load_questions, sibling_module

MAX_ROWS = 20
# (question, gold query) for one entity, and the query that lists the entities of a template.
Template = tuple[str, Callable[[Any], tuple[str, str]]]


def _quoted(text: str) -> str:
    return text.replace("'", "''")


TEMPLATES: list[Template] = [
    (
        "SELECT id FROM album ORDER BY id",
        lambda album: (
            f"List the names of the tracks on the album with id {album}.",
            f"SELECT name FROM track WHERE album_id = {album}",
        ),
    ),
    (
        "SELECT id FROM album ORDER BY id",
        lambda album: (
            f"What is the name of the longest track (by milliseconds) on the album with id {album}?",
            f"SELECT name FROM track WHERE album_id = {album} ORDER BY milliseconds DESC LIMIT 1",
        ),
    ),
    (
        "SELECT DISTINCT artist_id FROM album ORDER BY artist_id",
        lambda artist: (
            f"List the titles of the albums by the artist with id {artist}.",
            f"SELECT title FROM album WHERE artist_id = {artist}",
        ),
    ),
    (
        "SELECT DISTINCT billingcity FROM invoice ORDER BY billingcity",
        lambda city: (
            f"What is the total of all invoices billed to the city {city}?",
            f"SELECT SUM(total) FROM invoice WHERE billingcity = '{_quoted(city)}'",
        ),
    ),
    (
        "SELECT DISTINCT country FROM customer ORDER BY country",
        lambda country: (
            f"List the first and last names of the customers who live in {country}.",
            f"SELECT firstname, lastname FROM customer WHERE country = '{_quoted(country)}'",
        ),
    ),
]


def result_of(db: str, sql: str) -> Hashable | None:
    """The gold query's rows as a multiset, or None when they make a poor question (none, too many, or
    an all-zero or empty answer)."""
    rows = sibling_module("reward").execute(db, sql)
    if not 1 <= len(rows) <= MAX_ROWS or rows[0] in {(0,), (None,)}:
        return None
    return frozenset(Counter(rows).items())


def generated(db: str, per_template: int, seed: int, taken: set[Hashable]) -> Iterator[tuple[str, str]]:
    """Up to `per_template` new (question, gold query) pairs from each template, each with a result not
    in `taken` (which they join)."""
    rng = random.Random(seed)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        entity_lists = [[row[0] for row in conn.execute(query)] for query, _ in TEMPLATES]
    for entities, (_, make) in zip(entity_lists, TEMPLATES, strict=True):
        rng.shuffle(entities)
        made = 0
        for entity in entities:
            if made == per_template:
                break
            question, sql = make(entity)
            result = result_of(db, sql)
            if result is None or result in taken:
                continue
            taken.add(result)
            made += 1
            yield question, sql


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--per-template", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=QUESTIONS, help="the question file to append to")
    args = parser.parse_args()
    db = str(chinook_module().database_path(None))
    existing = load_questions(args.out)
    known = {q["question"] for q in existing}
    taken = {result_of(db, q["gold_sql"]) for q in existing} - {None}
    number = max(int(q["id"].rsplit("-", 1)[1]) for q in existing)
    added = []
    for question, sql in generated(db, args.per_template, args.seed, taken):
        if question in known:
            continue
        number += 1
        added.append(
            {"id": f"chinook-{number:03d}", "difficulty": "medium", "question": question, "gold_sql": sql}
        )
    with args.out.open("a") as handle:
        handle.writelines(json.dumps(item) + "\n" for item in added)
    print(f"{len(added)} questions added to {args.out} ({len(existing) + len(added)} in all)")


if __name__ == "__main__":
    main()
