"""Held-out scores of a pipeline run (teacher -> SFT -> RL), from its metrics.jsonl, as JSON and a line.

python examples/pipeline_summary.py PROJECT/.tether/runs/NAME --sft-steps N [--out summary.json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def summary(records: list[dict[str, Any]], sft_steps: int) -> dict[str, Any]:
    val = {r["step"]: r["val_score"] for r in records if r.get("kind") == "val"}
    updates = [r for r in records if r.get("kind") == "train"]
    last = max(val) if val else None
    return {
        "base": val.get(0),
        "after_sft": val.get(sft_steps),
        "after_rl": val[last] if last is not None and last > sft_steps else None,
        "val_steps": val,
        "sft_update_seconds": sum(r.get("train.seconds", 0.0) for r in updates if r.get("phase") == "sft"),
        "rl_rollout_seconds": sum(r.get("rollout_seconds", 0.0) for r in updates if r.get("phase") != "sft"),
        "rl_update_seconds": sum(r.get("train.seconds", 0.0) for r in updates if r.get("phase") != "sft"),
        "val_seconds": sum(r.get("val_seconds", 0.0) for r in records if r.get("kind") == "val"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--sft-steps", type=int, required=True)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = (args.run_dir / "metrics.jsonl").read_text().splitlines()
    result = summary([json.loads(line) for line in lines if line.strip()], args.sft_steps)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    def fmt(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    print(
        f"held-out: base {fmt(result['base'])} -> after SFT {fmt(result['after_sft'])} "
        f"-> after RL {fmt(result['after_rl'])}"
    )


if __name__ == "__main__":
    main()
