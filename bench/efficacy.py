"""Learning efficacy: Tether's full harness against TRL's GRPOTrainer in process, held-out accuracy against
training wall-clock, in one run.

    .venv/bin/python -m bench.efficacy [--budget 600] [--out DIR]    # full run, ~25-40 min on 2 cores
    .venv/bin/python -m bench.efficacy --quick                        # smoke run: 2 steps a side, 8 val tasks

The task: the arithmetic word problems of examples/arith_agent (`tasks.py --train 200 --val 32 --seed 0`,
disjoint by (operation, numbers)), asked as a single-turn prompt. Reward `examples/arith_agent/reward.py:
correct` on the number after "Answer:" (else the last number). Both sides train the same model with the
same LoRA on the same tasks, G completions for each of T prompts per optimizer step, and stop after their
first held-out evaluation past the same budget of training seconds. The two sides run one after the
other (never at once), in the order of --sides.

- Tether: `tether train` as a subprocess, the agent bench/efficacy_agent.py (a plain OpenAI client, one
  chat call), the built-in engine, --algorithm grpo, --no-air (no automatic step rewards, so the reward
  is the evaluator's alone), --checkpoint-every 0 (TRL saves nothing either). Its metrics.jsonl is
  followed as lines appear; the run is interrupted (SIGINT to its process group, then SIGKILL) after
  the first validation past the budget.
- TRL: bench/trl_grpo.py in bench/.venv-trl (bench/refenv.py, created on first use): `GRPOTrainer` with
  the same messages (conversational prompt, so the same SmolLM2 chat template), the same max completion
  length (40), temperature (0.7, top-p 1, no top-k) and reward, and a callback that evaluates greedily
  (one batched `generate` over the val prompts) and stops training.

Held-out accuracy: the val tasks, greedy (temperature 0), 40 tokens, at step 0 and every --val-every
steps; the mean reward over the val tasks.

The clocks (seconds of training; model loading and held-out evaluations are excluded on both sides):
- Tether: wall time from the moment the step-0 validation record appears in metrics.jsonl to the moment
  step k's train record appears, minus, for every earlier validation, the wall time from its step's train
  record to its own record. So it holds everything the harness does for a step: G x T agent processes
  (Python start-up, `import openai`, the HTTP call through the gateway), generation in the engine, span
  recording, transitions, advantages, the LoRA update, saving the adapter and the swap. Records are
  polled every 0.1 s. (The JSON also holds the sum of the steps' rollout_seconds + update_seconds +
  swap_seconds, which leaves out saving the adapter and the loop's own work.)
- TRL: `time.perf_counter()` from the end of the step-0 evaluation (in `on_train_begin`, after the model
  load and the trainer's construction) to `on_step_end` of step k, minus the evaluations in between:
  generation, reward, loss, backward, optimizer step and the Trainer's own work.

Matched (Tether's defaults, tether/learner/config.py, set explicitly on TRL's side): LoRA r 16, alpha 32,
dropout 0, the seven Llama projection modules; AdamW lr 1e-4 constant (no warm-up, no decay: TRL's
default linear decay is turned off), betas (0.9, 0.999), eps 1e-8, weight decay 0, gradient clipping at
norm 1; no KL (beta 0, no reference model); PPO clip 1 - 0.2 / 1 + 0.28 (epsilon 0.2, epsilon_high 0.28);
one generation batch = one optimizer step (per-device batch G x T, gradient accumulation 1,
steps_per_generation 1, num_iterations 1); fp32 weights, bf16 autocast only on a CUDA device that
supports it (Tether's rule `bf16_by_default`, the built-in engine's precision, applied on TRL's side too:
TRL's default is bf16 everywhere, emulated and many times slower on most CPUs), no gradient
checkpointing (TRL's default on); seed 0.

Not matched (say so when quoting the figures):
- Advantages: Tether's GRPO divides by the population std of the group plus 1e-6
  (tether/algorithms/advantages.py); TRL by the sample std (Bessel's n - 1) plus 1e-4. With G = 8 TRL's
  advantages are sqrt(7/8) = 0.935 of Tether's.
- Loss aggregation: both take the token mean within each completion, then the mean over completions
  (Tether's `loss_agg="rollout"`, TRL's `loss_type="grpo"`), but Tether drops zero-variance groups before
  the mean and skips the update when every group has equal rewards, while TRL keeps them (zero loss, but
  in the denominator) and still steps the optimizer (with a zero gradient, which moves Adam's weights
  by its momentum).
- Tether's importance weight against the engine's recorded logprobs (truncated at 2.0); TRL generates
  with the training model itself, so it has none (and needs none).
- Task order: each side draws its own seeded order of training tasks (Tether's curriculum, TRL's
  RepeatSampler); the tasks are the same.
- Generation: Tether's engine decodes with continuous batching (up to 32 at once); TRL calls `generate`
  on the step's G x T prompts at once. On CUDA, Tether's engine runs bf16 weights while TRL generates
  with its fp32 training weights (under autocast when bf16 is on).
- bf16, where it is on: Tether's learner autocasts the transformer body only (lm_head and loss in
  fp32); TRL (accelerate) autocasts the whole forward, its fused lm_head included.
- Environment: Tether's model processes set OMP_WAIT_POLICY=PASSIVE (they share the cores with agent
  processes); TRL runs with the environment as given.

Reading the figures: the time to an accuracy is known only at evaluations (every --val-every steps), and
both clocks include each side's one-time costs of its first step. Right after bench/.venv-trl is created
the first TRL step also reads torch's libraries from disk (measured here: 189 s instead of 37 s for that
step), so run it once more then. Accuracy on 32 tasks moves by 1/32 per task and from run to run; quote
a ratio over several runs.

Output: a progress line per evaluation on stderr; on stdout the machine, a markdown table (step, samples
seen, each side's clock and accuracy) and the time-to-accuracy ratio: Tether seconds / TRL seconds to
the highest accuracy both sides reach, and Tether's time to TRL's best accuracy (or "not reached").
--out (default: a new temporary folder) gets efficacy.json (every point, each task's reward, settings,
versions), efficacy.png (accuracy against training seconds, both curves; when matplotlib imports), the
tasks, the Tether project (its run's metrics.jsonl) and both sides' logs.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import refenv
from bench.report import measured_on, not_run

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
AGENT = HERE / "efficacy_agent.py"
TRL_SCRIPT = HERE / "trl_grpo.py"
TASKS_SCRIPT = ROOT / "examples" / "arith_agent" / "tasks.py"
REWARD = f"{ROOT / 'examples' / 'arith_agent' / 'reward.py'}:correct"
SIDES = ("tether", "trl")
POLL_S = 0.1
STOP_GRACE_S = 60.0
QUICK = {"val": 8, "val_every": 1, "max_steps": 2}


@dataclass
class Settings:
    model: str
    budget: float
    group_size: int
    tasks_per_step: int
    val_every: int
    train: int
    val: int
    max_steps: int
    lr: float
    seed: int
    side_timeout: float
    sides: tuple[str, ...]
    quick: bool

    @property
    def samples_per_step(self) -> int:
        return self.group_size * self.tasks_per_step


@dataclass
class Side:
    """One side's evaluations (`points`, in step order), or why it has none (`error`)."""

    name: str
    points: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "Tether" if self.name == "tether" else "TRL"


# -- the command line -------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.efficacy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--budget", type=float, default=600.0, help="training seconds per side (default 600)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 8 val tasks, 2 steps, val every step"
    )
    parser.add_argument("--model", default="smollm2-135m", help="catalogue name or local HF folder")
    parser.add_argument("--group-size", type=int, default=8, help="completions per prompt (G)")
    parser.add_argument("--tasks-per-step", type=int, default=3, help="prompts per optimizer step (T)")
    parser.add_argument("--val-every", type=int, default=None, help="held-out evaluation every E steps (2)")
    parser.add_argument("--train", type=int, default=200, help="training tasks")
    parser.add_argument("--val", type=int, default=None, help="held-out tasks (32)")
    parser.add_argument("--max-steps", type=int, default=None, help="also stop at this step (0: budget only)")
    parser.add_argument("--lr", type=float, default=1e-4, help="learning rate, both sides (Tether's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sides", default="tether,trl", help="which sides, in the order they run")
    parser.add_argument(
        "--side-timeout",
        type=float,
        default=None,
        help="wall seconds a side may take in all (3 x budget + 1800)",
    )
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: a new temp folder)")
    return parser.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    quick = QUICK if args.quick else {}
    sides = tuple(s.strip() for s in args.sides.split(",") if s.strip())
    unknown = [s for s in sides if s not in SIDES]
    if unknown or not sides:
        raise SystemExit(f"--sides: expected a list of {', '.join(SIDES)}, got {args.sides!r}")

    def pick(value: int | None, name: str, default: int) -> int:
        return value if value is not None else int(quick.get(name, default))

    settings = Settings(
        model=args.model,
        budget=args.budget,
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        val_every=pick(args.val_every, "val_every", 2),
        train=args.train,
        val=pick(args.val, "val", 32),
        max_steps=pick(args.max_steps, "max_steps", 0),
        lr=args.lr,
        seed=args.seed,
        side_timeout=args.side_timeout if args.side_timeout is not None else 3 * args.budget + 1800,
        sides=sides,
        quick=args.quick,
    )
    if settings.val_every < 1 or settings.group_size < 2 or settings.tasks_per_step < 1 or settings.val < 1:
        raise SystemExit("need --val-every >= 1, --group-size >= 2, --tasks-per-step >= 1 and --val >= 1")
    return settings


def progress(side: Side, point: dict[str, Any]) -> None:
    print(
        f"efficacy: {side.label:6} step {point['step']:3d} ({point['samples']:4d} samples): held-out "
        f"accuracy {point['accuracy']:.3f} at {point['clock_s']:7.1f} s of training "
        f"(evaluation {point['eval_s']:.1f} s)",
        file=sys.stderr,
        flush=True,
    )


# -- shared plumbing ----------------------------------------------------------------------------------


def make_tasks(settings: Settings, folder: Path) -> tuple[Path, Path]:
    args = [sys.executable, str(TASKS_SCRIPT), "--out-dir", str(folder), "--train", str(settings.train)]
    args += ["--val", str(settings.val), "--seed", str(settings.seed)]
    subprocess.run(args, check=True, capture_output=True, timeout=120)
    return folder / "train.jsonl", folder / "val.jsonl"


def task_ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text().splitlines() if line.strip()]


def new_lines(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """The complete JSON lines of `path` after byte `offset`, and the offset after them."""
    if not path.exists():
        return [], offset
    with path.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1
    return [json.loads(line) for line in data[:end].splitlines() if line.strip()], offset + end


def log_tail(path: Path, lines: int = 3) -> str:
    try:
        tail = [line for line in path.read_text(errors="replace").splitlines() if line.strip()][-lines:]
    except OSError:
        return "no log"
    return " | ".join(tail)[-300:]


def stop_group(process: subprocess.Popen[bytes]) -> None:
    """SIGINT to the process group (Ctrl-C: the command cleans up), SIGKILL if it has not exited."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def follow(
    process: subprocess.Popen[bytes],
    path: Path,
    feed: Callable[[dict[str, Any], float], bool],
    timeout: float,
) -> str | None:
    """Feeds each new line of `path` (with the time it was seen) until `feed` says done (None), the
    process exits (its exit status, or None for 0) or `timeout` passes ("timed out")."""
    offset, deadline = 0, time.monotonic() + timeout
    while True:
        exited = process.poll()
        records, offset = new_lines(path, offset)
        seen = time.monotonic()
        for record in records:
            if feed(record, seen):
                return None
        if exited is not None:
            return None if exited == 0 else f"exit status {exited}"
        if seen > deadline:
            return "timed out"
        time.sleep(POLL_S)


def start(args: list[str], log: Path, stdout: Path | None = None) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as err, (stdout or log).open("ab") as out:
        return subprocess.Popen(
            args, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
        )


def settle(side: Side, ended: str | None, what: str, log: Path) -> None:
    """Records how the side ended: no points is "could not run"; a crash or time-out after some points
    keeps them, with a note."""
    side.info["stopped"] = ended or "after the first evaluation past the budget (or at --max-steps)"
    if not side.points:
        side.error = not_run(f"{what}: {ended or 'no evaluation'}: {log_tail(log)}")
    elif ended is not None:
        side.error = f"ended early ({what}: {ended}), its points up to then kept: {log_tail(log)}"


def done_at(settings: Settings, step: int, clock: float) -> bool:
    return clock >= settings.budget or (settings.max_steps > 0 and step >= settings.max_steps)


# -- Tether ------------------------------------------------------------------------------------------


@dataclass
class TetherClock:
    """Turns metrics.jsonl records, stamped with the time they were seen, into evaluation points."""

    settings: Settings
    side: Side
    val_ids: list[str]
    origin: float | None = None
    excluded: float = 0.0
    last_train: tuple[int, float, float] = (0, 0.0, 0.0)  # step, seen, clock
    step_seconds: float = 0.0
    train_rewards: list[float] = field(default_factory=list)

    def feed(self, record: dict[str, Any], seen: float) -> bool:
        if record.get("kind") == "train" and self.origin is not None:
            step = int(record["step"])
            self.last_train = (step, seen, seen - self.origin - self.excluded)
            self.step_seconds += sum(float(record.get(k, 0.0)) for k in ("rollout_seconds", "update_seconds"))
            self.step_seconds += float(record.get("swap_seconds", 0.0))
            self.train_rewards.append(float(record.get("reward_mean", 0.0)))
            return False
        if record.get("kind") != "val":
            return False
        step = int(record["step"])
        if self.origin is None:
            self.origin, clock = seen, 0.0
        else:
            _, train_seen, clock = self.last_train
            self.excluded += seen - train_seen
        self._point(record, step, clock)
        return step > 0 and done_at(self.settings, step, clock)

    def _point(self, record: dict[str, Any], step: int, clock: float) -> None:
        rewards = record.get("val_rewards") or {}
        point = {
            "step": step,
            "samples": step * self.settings.samples_per_step,
            "clock_s": clock,
            "accuracy": float(record["val_score"]),
            "eval_s": float(record.get("val_seconds", 0.0)),
            "rewards": {task: float(rewards[task]) for task in self.val_ids if task in rewards},
            "train_reward_mean": statistics.fmean(self.train_rewards) if self.train_rewards else None,
            "step_seconds_sum": self.step_seconds,
        }
        self.train_rewards = []
        self.side.points.append(point)
        progress(self.side, point)


def tether_command(settings: Settings, train: Path, val: Path, project: Path, run: str) -> list[str]:
    tether = Path(sys.executable).with_name("tether")
    if not tether.exists():
        raise FileNotFoundError(f"no `tether` next to {sys.executable}: run with the project's venv")
    options = {
        "--project-dir": project,
        "--agent": shlex.join([sys.executable, str(AGENT)]),
        "--tasks": train,
        "--val-tasks": val,
        "--reward": REWARD,
        "--model": settings.model,
        "--algorithm": "grpo",
        "--group-size": settings.group_size,
        "--tasks-per-step": settings.tasks_per_step,
        "--steps": settings.max_steps or 1_000_000,  # the budget stops it
        "--val-every": settings.val_every,
        "--checkpoint-every": 0,
        "--lr": settings.lr,
        "--seed": settings.seed,
        "--run-name": run,
    }
    return [str(tether), "train", "--no-air", *(str(x) for pair in options.items() for x in pair)]


def run_tether(settings: Settings, train: Path, val: Path, out: Path, stamp: str) -> Side:
    side = Side("tether")
    run = f"efficacy-{stamp}"
    project = out / "tether"
    log = out / "logs" / f"{stamp}-tether.log"
    metrics = project / ".tether" / "runs" / run / "metrics.jsonl"
    side.info.update(run=run, metrics=str(metrics), log=str(log))
    try:
        args = tether_command(settings, train, val, project, run)
    except FileNotFoundError as exc:
        side.error = not_run(exc)
        return side
    side.info["command"] = shlex.join(args)
    clock = TetherClock(settings, side, task_ids(val))
    process = start(args, log)
    try:
        ended = follow(process, metrics, clock.feed, settings.side_timeout)
    finally:
        stop_group(process)
    settle(side, ended, "tether train", log)
    return side


# -- TRL ---------------------------------------------------------------------------------------------


def trl_command(settings: Settings, python: Path, train: Path, val: Path, points: Path) -> list[str]:
    from tether.models.catalog import resolve_model

    folder = resolve_model(settings.model)
    args = [str(python), str(TRL_SCRIPT), "--model", str(folder), "--train", str(train), "--val", str(val)]
    args += ["--points", str(points), "--reward", REWARD, "--val-every", str(settings.val_every)]
    args += ["--group-size", str(settings.group_size), "--tasks-per-step", str(settings.tasks_per_step)]
    args += ["--budget", str(settings.budget), "--max-steps", str(settings.max_steps)]
    return args + ["--lr", str(settings.lr), "--seed", str(settings.seed)]


def trl_point(side: Side, val_ids: list[str], line: dict[str, Any]) -> bool:
    point = {
        "step": int(line["step"]),
        "samples": int(line["samples"]),
        "clock_s": float(line["clock_s"]),
        "accuracy": float(line["accuracy"]),
        "eval_s": float(line["eval_seconds"]),
        "rewards": dict(zip(val_ids, line["rewards"], strict=True)),
        "train_reward_mean": line.get("train_reward_mean"),
    }
    side.points.append(point)
    progress(side, point)
    return False  # TRL's callback stops it; the parent only waits


def run_trl(settings: Settings, train: Path, val: Path, out: Path, stamp: str) -> Side:
    side = Side("trl")
    log = out / "logs" / f"{stamp}-trl.log"
    points = out / "trl" / f"{stamp}.points.jsonl"
    result = out / "trl" / f"{stamp}.result.json"
    points.parent.mkdir(parents=True, exist_ok=True)
    side.info.update(log=str(log), points=str(points))
    try:
        python = refenv.ensure_trl(out / "logs" / "trl-install.log")
        args = trl_command(settings, python, train, val, points)
    except (refenv.Unavailable, OSError, ValueError, subprocess.SubprocessError) as exc:
        side.error = not_run(exc)
        return side
    side.info["command"] = shlex.join(args)
    val_ids = task_ids(val)
    process = start(args, log, stdout=result)
    try:
        ended = follow(process, points, lambda line, _: trl_point(side, val_ids, line), settings.side_timeout)
    finally:
        stop_group(process)
    side.info.update({k: v for k, v in last_json(result).items() if k != "points"})
    settle(side, ended, "trl_grpo.py", log)
    return side


def last_json(path: Path) -> dict[str, Any]:
    try:
        lines = [line for line in path.read_text().splitlines() if line.startswith("{")]
        return json.loads(lines[-1]) if lines else {}
    except (OSError, json.JSONDecodeError):
        return {}


# -- the report --------------------------------------------------------------------------------------


def first_reach(points: list[dict[str, Any]], target: float) -> float | None:
    """Training seconds at the first evaluation whose accuracy is at least `target`."""
    for point in points:
        if point["accuracy"] >= target - 1e-9:
            return float(point["clock_s"])
    return None


def ratio_of(ours: float | None, theirs: float | None) -> float | str:
    if ours is None:
        return "not reached"
    if theirs is None or ours <= 0 or theirs <= 0:
        return "n/a (reached at step 0)"
    return ours / theirs


def time_to_accuracy(tether: Side, trl: Side) -> dict[str, Any]:
    """Tether's seconds over TRL's: to the highest accuracy both reach, and to TRL's best accuracy."""
    if not tether.points or not trl.points:
        return {"common": None, "trl_best": None, "why": "a side has no evaluations"}
    best_tether = max(p["accuracy"] for p in tether.points)
    best_trl = max(p["accuracy"] for p in trl.points)
    common = min(best_tether, best_trl)
    result: dict[str, Any] = {}
    for name, target in (("common", common), ("trl_best", best_trl)):
        ours, theirs = first_reach(tether.points, target), first_reach(trl.points, target)
        result[name] = {
            "accuracy": target,
            "tether_s": ours,
            "trl_s": theirs,
            "ratio": ratio_of(ours, theirs),
        }
    return result


def _cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(tether: Side, trl: Side) -> str:
    by_step = {side.name: {p["step"]: p for p in side.points} for side in (tether, trl)}
    steps = sorted(set(by_step["tether"]) | set(by_step["trl"]))
    lines = [
        "| step | samples seen | Tether clock (s) | Tether accuracy | TRL clock (s) | TRL accuracy |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for step in steps:
        a, b = by_step["tether"].get(step), by_step["trl"].get(step)
        cells = [
            _cell(a and a["clock_s"], 1),
            _cell(a and a["accuracy"], 3),
            _cell(b and b["clock_s"], 1),
            _cell(b and b["accuracy"], 3),
        ]
        samples = (a or b or {}).get("samples", 0)
        lines.append(f"| {step} | {samples} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_ratios(ratios: dict[str, Any]) -> list[str]:
    if ratios.get("common") is None:
        return [f"time to accuracy: not measured ({ratios.get('why', 'no evaluations')})"]
    lines = []
    for name, what in (("common", "the highest accuracy both reach"), ("trl_best", "TRL's best accuracy")):
        r = ratios[name]
        ratio = r["ratio"] if isinstance(r["ratio"], str) else f"{r['ratio']:.2f}x (Tether / TRL)"
        lines.append(
            f"time to {r['accuracy']:.3f} ({what}): Tether {_seconds(r['tether_s'])}, "
            f"TRL {_seconds(r['trl_s'])}: {ratio}"
        )
    return lines


def _seconds(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.1f} s"


def plot(tether: Side, trl: Side, budget: float, path: Path) -> str | None:
    """Accuracy against training seconds, both curves; None when matplotlib does not import."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        return f"no plot: {exc}"
    figure, axes = plt.subplots(figsize=(7, 4.2))
    for side, style in ((tether, "o-"), (trl, "s--")):
        if side.points:
            xs = [p["clock_s"] for p in side.points]
            axes.plot(xs, [p["accuracy"] for p in side.points], style, label=side.label)
    axes.axvline(budget, color="grey", linewidth=0.8, linestyle=":", label=f"budget {budget:.0f} s")
    axes.set_xlabel("training seconds (model load and evaluations excluded)")
    axes.set_ylabel("held-out accuracy (greedy)")
    axes.set_ylim(-0.02, 1.02)
    axes.set_title("Tether harness vs TRL GRPOTrainer: single-turn arithmetic")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return None


def settings_line(settings: Settings) -> str:
    limit = f", at most {settings.max_steps} steps" if settings.max_steps else ""
    return (
        f"- G={settings.group_size}, T={settings.tasks_per_step} "
        f"({settings.samples_per_step} samples a step), {settings.val} held-out tasks every "
        f"{settings.val_every} steps, {settings.budget:.0f} s of training per side{limit}"
    )


def base_agreement(tether: Side, trl: Side) -> str | None:
    """How many held-out tasks both sides scored alike at step 0 (same base model, both greedy): a check
    that the two sides see the same prompts and parse answers alike."""
    if not tether.points or not trl.points or tether.points[0]["step"] or trl.points[0]["step"]:
        return None
    ours, theirs = tether.points[0]["rewards"], trl.points[0]["rewards"]
    same = sum(ours[task] == theirs[task] for task in ours if task in theirs)
    return f"step 0 (base model, greedy): the two sides score {same} of {len(ours)} held-out tasks alike"


def side_json(side: Side) -> dict[str, Any]:
    return {"error": side.error, "info": side.info, "points": side.points}


def report(settings: Settings, sides: dict[str, Side], out: Path, seconds: float) -> str:
    tether, trl = sides.get("tether", Side("tether")), sides.get("trl", Side("trl"))
    ratios = time_to_accuracy(tether, trl)
    references = {
        "trl": str(trl.info.get("trl", "not run")),
        "torch (TRL venv)": str(trl.info.get("torch", "-")),
    }
    machine = measured_on("quick" if settings.quick else "full", references, seconds)
    no_plot = plot(tether, trl, settings.budget, out / "efficacy.png")
    agreement = base_agreement(tether, trl)
    data = {
        "settings": asdict(settings),
        "machine": machine.splitlines(),
        "tether": side_json(tether),
        "trl": side_json(trl),
        "time_to_accuracy": ratios,
        "base_agreement": agreement,
    }
    (out / "efficacy.json").write_text(json.dumps(data, indent=1) + "\n")
    errors = [f"{side.label}: {side.error}" for side in (tether, trl) if side.error]
    notes = describe_ratios(ratios) + ([agreement] if agreement else []) + errors
    parts = [
        "## Learning efficacy: Tether's harness vs TRL's GRPOTrainer (single-turn arithmetic)",
        "",
        machine,
        settings_line(settings),
        "",
        table(tether, trl),
        "",
        *(f"- {line}" for line in notes),
        "",
        f"written: {out / 'efficacy.json'}" + (f" ({no_plot})" if no_plot else f", {out / 'efficacy.png'}"),
    ]
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = settings_from(args)
    out = (args.out or Path(tempfile.mkdtemp(prefix="tether-efficacy-"))).resolve()
    (out / "logs").mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    print(f"efficacy: output in {out}", file=sys.stderr, flush=True)
    started = time.monotonic()
    train, val = make_tasks(settings, out / "data")
    runners = {"tether": run_tether, "trl": run_trl}
    sides = {name: runners[name](settings, train, val, out, stamp) for name in settings.sides}
    print(report(settings, sides, out, time.monotonic() - started))


if __name__ == "__main__":
    main()
