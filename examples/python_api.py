"""The demo's run from Python: the same settings `tether train` takes as flags, as a typed tree.

    python examples/python_api.py                                  # SmolLM2-135M, 12 steps (the demo)
    python examples/python_api.py --model tiny-random --steps 1    # a smoke run in seconds

`tether.train(settings)` runs exactly what the command line runs (the sandbox, warm starts, resume,
validation, checkpoints); `settings` is the tree `tether train --print-config` prints, and the run folder
keeps it as config.toml, so `tether train --config RUN_FOLDER/config.toml` resumes this run from the shell.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import tether

HERE = Path(__file__).resolve().parent


def settings_for(project: Path, model: str, steps: int) -> tether.TrainSettings:
    settings = tether.TrainSettings()
    settings.agent.command = f"{sys.executable} {HERE / 'arith_agent' / 'agent.py'}"
    settings.tasks.file = str(project / "data" / "train.jsonl")
    settings.validation.tasks = str(project / "data" / "val.jsonl")
    settings.rewards.reward = [f"{HERE / 'arith_agent' / 'reward.py'}:correct"]
    settings.server.model = model
    settings.learner.algorithm = "grpo"
    settings.sampling.group_size = 8
    settings.sampling.tasks_per_step = 3
    settings.schedule.steps = steps
    settings.validation.every = 4
    settings.run.name = "python-api"
    settings.store.project_dir = str(project)
    return settings


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--project-dir", type=Path, default=Path("demo-project"))
    parser.add_argument("--model", default="smollm2-135m", help="smollm2-135m, tiny-random or a local folder")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--val", type=int, default=32, help="held-out tasks")
    args = parser.parse_args()
    data = args.project_dir / "data"
    tasks = [sys.executable, str(HERE / "arith_agent" / "tasks.py"), "--out-dir", str(data)]
    subprocess.run([*tasks, "--val", str(args.val), "--seed", "0"], check=True)
    result = tether.train(settings_for(args.project_dir, args.model, args.steps))
    print(f"held-out accuracy before {result.val_before}, after {result.val_after} ({result.steps} steps)")
    print(f"run folder {result.run_dir}")


if __name__ == "__main__":
    main()
