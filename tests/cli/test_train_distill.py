"""`tether train --algorithm opd`: the student (the tiny model) samples through its unmodified agent, and
a teacher served by `tether serve --adapter` (the same model with a LoRA of its own) scores every token."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import orjson
import pytest
import torch

from tests.serve_process import serve_process
from tether.cli.main import main
from tether.models.catalog import TINY_RANDOM, resolve_model
from tether.store import SQLiteStore

AGENTS = Path(__file__).parent / "agents"


def random_adapter(out: Path) -> Path:
    """A LoRA whose weights are random, not zero: the teacher differs from the student it teaches."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(5)
    base = AutoModelForCausalLM.from_pretrained(resolve_model(TINY_RANDOM))
    config = LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(out)
    return out


def distill_args(project: Path, teacher_url: str, *extra: str) -> list[str]:
    project.mkdir(parents=True, exist_ok=True)
    tasks = project / "tasks.jsonl"
    tasks.write_text(
        "".join(json.dumps({"id": f"t{i}", "q": f"say {i}", "sleep": 0}) + "\n" for i in range(3))
    )
    return [
        "train",
        "--agent",
        f"{sys.executable} {AGENTS / 'one_call_agent.py'}",
        "--tasks",
        str(tasks),
        "--model",
        "tiny-random",
        "--algorithm",
        "opd",
        "--teacher",
        teacher_url,
        "--group-size",
        "1",
        "--tasks-per-step",
        "2",
        "--steps",
        "2",
        "--val-every",
        "0",
        "--project-dir",
        str(project),
        *extra,
    ]


def test_the_student_is_updated_on_the_teachers_per_token_scores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    adapter = random_adapter(tmp_path / "teacher-adapter")
    with serve_process(tmp_path / "teacher", "--model", "tiny-random", "--adapter", str(adapter)) as teacher:
        monkeypatch.setenv("TETHER_TEACHER_KEY", teacher.api_key)
        assert main(distill_args(tmp_path / "student", teacher.base_url)) == 0
        (run_dir,) = (tmp_path / "student" / ".tether" / "runs").iterdir()
        steps = [orjson.loads(line) for line in (run_dir / "metrics.jsonl").read_bytes().splitlines()]
        steps = [s for s in steps if s["kind"] == "train"]
        assert [s["step"] for s in steps] == [1, 2]
        for step in steps:
            # No reward was given: every rollout's is 0, and still each step trains on every token.
            assert step["samples"] == 2 and step["train.tokens"] > 0
            assert step["opd.reverse_kl"] != 0.0 and step["policy_version_after"] == step["step"]
        student_calls = SQLiteStore(tmp_path / "student" / ".tether" / "store.db").query_spans()
        teacher_calls = SQLiteStore(tmp_path / "teacher" / ".tether" / "store.db").query_spans()
        # One scoring call per transition, and one more for the tokenizer probe at start.
        llm = [s for s in student_calls if s.name.startswith("llm.")]
        assert len([s for s in teacher_calls if s.name == "llm.completions"]) == len(llm) + 1


def test_opd_is_refused_without_a_teacher_and_a_teacher_without_opd(tmp_path: Path) -> None:
    args = distill_args(tmp_path, "http://127.0.0.1:9/v1")
    without = [a for i, a in enumerate(args) if a != "--teacher" and args[i - 1] != "--teacher"]
    with pytest.raises(SystemExit, match="--algorithm opd distills from a teacher: give --teacher URL"):
        main(without)
    grpo = [("grpo" if a == "opd" else a) for a in args]
    with pytest.raises(SystemExit, match="--teacher is the teacher of --algorithm opd"):
        main([*grpo, "--group-size", "2"])


def test_an_unreachable_teacher_is_refused_before_the_model_loads(tmp_path: Path) -> None:
    with pytest.raises(
        SystemExit, match="the teacher at http://127.0.0.1:9/v1 did not score the tokenizer probe"
    ):
        main(distill_args(tmp_path, "http://127.0.0.1:9/v1"))
