"""The run, its tasks and its store."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tether.config.option import Identity, option
from tether.store.backends import STORE_ENV


@dataclass
class RunSettings:
    """The run: its name, and whether it starts over."""

    name: str | None = option(
        None,
        "the run's name (default: derived from the command line, so running the same command "
        "again resumes the run: only what is missing runs)",
        flags=("--run",),
        dest="run",
        metavar="NAME",
    )
    fresh: bool = option(
        False,
        "start the run over: the old one is kept under NAME~N, its queued rollouts cancelled",
    )


@dataclass
class TrainRunSettings:
    """The run: its name, whether it starts over or resumes, and its seed."""

    name: str | None = option(
        None,
        "the run (its folder is .tether/runs/NAME; default: derived from the command line, so "
        "running the same command again resumes it from its last checkpoint)",
        flags=("--run", "--run-name"),
        dest="run",
        metavar="NAME",
    )
    fresh: bool = option(
        False,
        "start the run over: the old one is kept under NAME~N (folder and rollouts)",
    )
    resume: bool = option(
        False,
        "without --run: resume the most recent run that has a checkpoint",
    )
    seed: int = option(
        0,
        "seeds the adapter's initialisation, the order of the tasks and demonstrations, and sampling",
        run="shape",
    )
    wandb: str | None = option(
        None,
        "also log the metrics (and sample rollouts of each validation) to this Weights & Biases "
        "project; WANDB_MODE=offline keeps the run on disk, under the run folder",
        metavar="PROJECT",
    )


def resolved_file(path: str | None) -> str | None:
    """A task file as a run records it: its absolute path (the same file from any folder)."""
    return str(Path(path).resolve()) if path else None


@dataclass
class TaskSettings:
    """The tasks the agent runs."""

    file: str | None = option(
        None,
        "task file: JSON lines, one task each; a task's 'reference' object is for --reward only",
        metavar="FILE",
        required=True,
        flags=("--tasks",),
        dest="tasks",
        run=Identity("name", value=lambda path, _: resolved_file(path)),
    )


@dataclass
class SearchTaskSettings(TaskSettings):
    """The tasks candidates run on, and the held-out tasks that score them."""

    val_tasks: str | None = option(
        None,
        "tasks candidates are scored on",
        metavar="FILE",
        required=True,
        run=Identity("name", value=lambda path, _: resolved_file(path)),
    )


@dataclass
class GroupSettings:
    """How many rollouts of each task, and their label."""

    group_size: int = option(1, "rollouts per task (a GRPO group)", run="shape")
    mode: str = option("train", "label stored on the rollouts (train, val, ...)", run="shape")


@dataclass
class StoreSettings:
    """Where rollouts, spans and rewards are kept."""

    url: str | None = option(
        None,
        f"the store: a SQLite file path or sqlite:///PATH, memory:, postgresql://USER@HOST:PORT/DB"
        f" (never a password here: PGPASSWORD, ~/.pgpass or ${STORE_ENV}), or http(s)://HOST:PORT"
        f" of a `tether serve` (default: ${STORE_ENV}, else .tether/store.db of the project)",
        metavar="URL",
        flags=("--store",),
        dest="store",
    )
    project_dir: str | None = option(
        None,
        "project directory holding .tether/ (default: cwd)",
    )
