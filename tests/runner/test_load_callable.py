"""`--reward file.py:function`: the evaluator file runs as an imported module would (a @dataclass in it
works, string annotations too), and is not left registered afterwards (so Ray pickles its functions by
value, as before)."""

from __future__ import annotations

import sys
from pathlib import Path

from tether.runner.rewards import load_callable


def test_an_evaluator_file_with_a_dataclass_loads_and_scores(tmp_path: Path) -> None:
    path = tmp_path / "dataclass_reward.py"
    path.write_text(
        "from __future__ import annotations\n\nfrom dataclasses import dataclass\n\n"
        "@dataclass\nclass Verdict:\n    score: float\n\n"
        "def judge(task, output):\n    return Verdict(1.0 if output == task['answer'] else 0.0).score\n"
    )
    judge = load_callable(f"{path}:judge")
    assert judge({"answer": "4"}, "4") == 1.0
    assert judge({"answer": "4"}, "5") == 0.0
    assert "dataclass_reward" not in sys.modules
