"""`tether plot RUN`: the reward and validation curves of a training run, as a PNG."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tether.trainer.metrics import read_metrics


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw a training run's reward and validation curves to a PNG",
        description="Read RUN/metrics.jsonl (written by `tether train`) and draw train reward and val score.",
    )
    parser.add_argument("run_dir", metavar="RUN", type=Path, help="the run folder (or its metrics.jsonl)")
    parser.add_argument("--out", type=Path, help="PNG path (default: RUN/curves.png)")
    parser.set_defaults(command_main=run)


def plot(records: list[dict[str, Any]], out: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    updates = [r for r in records if r.get("kind") == "train"]
    # Imitation updates train on demonstrations: their rewards are the teacher's, not the policy's.
    imitation = [r["step"] for r in updates if r.get("phase") == "sft"]
    train = [(r["step"], r["reward_mean"]) for r in updates if "reward_mean" in r and r.get("phase") != "sft"]
    val = [(r["step"], r["val_score"]) for r in records if r.get("kind") == "val"]
    figure, axis = plt.subplots(figsize=(7, 4), dpi=120)
    if imitation:
        axis.axvspan(0, max(imitation), color="tab:green", alpha=0.12, label="SFT on demonstrations")
    if train:
        axis.plot(
            *zip(*train, strict=True),
            label="train reward (mean over the step's rollouts, sampled)",
            color="tab:blue",
            alpha=0.7,
        )
    if val:
        axis.plot(*zip(*val, strict=True), "o-", label="held-out accuracy (greedy)", color="tab:red")
    axis.set_xlabel("training step")
    axis.set_ylabel("reward / accuracy")
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3)
    if imitation or train or val:
        axis.legend()
    axis.set_title(title)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    plt.close(figure)
    return out


def run(args: argparse.Namespace) -> int:
    try:
        records = read_metrics(args.run_dir)
    except FileNotFoundError as exc:
        raise SystemExit(f"tether plot: {exc}") from None
    folder = args.run_dir if args.run_dir.is_dir() else args.run_dir.parent
    out = plot(records, args.out or folder / "curves.png", folder.name)
    print(f"wrote {out}")
    return 0
