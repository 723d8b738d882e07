"""Learn from deployment, end to end on this CPU: `tether serve` with a canary in front of the arithmetic
agent, simulated users (users.py) who rate answers later, and cycles of

    users visit -> tether train --from-sessions (the next version) -> the canary tries it on a share of
    new sessions -> promoted or rolled back on the users' ratings -> the next cycle

then the last incumbent measured on new users against the first version's users. Figures go to
OUT/summary.json and a table on stdout.

    python examples/deployment/cycles.py --out deployment-project --cycles 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from users import Behaviour, Users, Visit, load_problems  # noqa: E402

from tether.rewards.intervals import bootstrap_interval, difference_interval  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RUN = "sessions"
TETHER = [sys.executable, "-m", "tether.cli.main"]


def main() -> int:
    args = parse_args()
    project = Path(args.out).resolve()
    project.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, str(ROOT / "examples/arith_agent/tasks.py"), "--out-dir", str(project / "data")]
        + ["--train", "400", "--val", "8", "--seed", str(args.seed)],
        check=True,
    )
    problems = load_problems(project / "data" / "train.jsonl")
    policies = project / ".tether" / "runs" / f"from-{RUN}" / "policies"
    with served(project, policies, args) as (url, keys):
        users = Users(url, keys["deploy_key"], keys["reward_key"], problems, Behaviour(), args.seed)
        summary = run_cycles(args, project, url, keys, users)
    (project / "summary.json").write_text(json.dumps(summary, indent=1))
    print_table(summary)
    return 0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="deployment-project", help="the project folder")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--first", type=int, default=64, help="users of the first version before training")
    parser.add_argument("--share", default="50%", help="the canary's share of new sessions")
    parser.add_argument("--min-sessions", type=int, default=24, help="rated sessions per arm to decide")
    parser.add_argument("--max-sessions", type=int, default=64, help="rated canary sessions, then roll back")
    parser.add_argument("--final", type=int, default=64, help="users of the last incumbent, measured")
    parser.add_argument("--train-steps", type=int, default=8, help="updates per version")
    parser.add_argument("--train-args", default="--lr 3e-4", help="more `tether train` flags, one string")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args()


class served:
    """`tether serve` with the canary, for the example's whole run."""

    def __init__(self, project: Path, policies: Path, args: argparse.Namespace) -> None:
        self.command = [
            *TETHER,
            *("serve", "--project-dir", str(project), "--port", "0", "--no-session"),
            *("--model", args.model, "--canary", args.share, "--watch", str(policies)),
            *(
                "--canary-min-sessions",
                str(args.min_sessions),
                "--canary-max-sessions",
                str(args.max_sessions),
            ),
            *("--canary-interval", "2", "--session-idle", "600"),
        ]
        self.project = project

    def __enter__(self) -> tuple[str, dict[str, str]]:
        self.process = subprocess.Popen(self.command, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        url = ""
        for line in self.process.stdout:
            if line.startswith("Tether gateway on "):
                url = line.split()[3]
            if line.strip() == "ready":
                break
        if not url or self.process.poll() is not None:
            raise SystemExit("tether serve did not start")
        state = self.project / ".tether"
        names = ("deploy_key", "reward_key", "admin_token")
        return url, {name: (state / name).read_text().strip() for name in names}

    def __exit__(self, *_: object) -> None:
        self.process.terminate()
        self.process.wait(timeout=60)


def run_cycles(
    args: argparse.Namespace, project: Path, url: str, keys: dict[str, str], users: Users
) -> dict[str, Any]:
    started = time.monotonic()
    print(f"{args.first} users of the first version (v0, the base model) ...", flush=True)
    since = time.time()
    first = users.visit(args.first, "first")
    users.settle()
    cycles = []
    for cycle in range(1, args.cycles + 1):
        trained_at = time.time()
        train(project, args, since)
        since = trained_at
        version = wait_for_canary(url, keys, cycle)
        print(f"cycle {cycle}: v{version} is the canary; users visit until it is decided ...", flush=True)
        visits: list[Visit] = []
        decision = None
        while decision is None:
            visits += users.visit(16, f"c{cycle}")
            users.settle()
            decision = decided(url, keys, version)
        cycles.append(
            {
                "cycle": cycle,
                "version": version,
                "decision": decision["event"],
                "reason": decision["reason"],
                "comparison": decision["comparison"],
                "sessions": len(visits),
                "correct": accuracy([v for v in visits if v.arm == "canary"]),
                "incumbent_correct": accuracy([v for v in visits if v.arm == "incumbent"]),
            }
        )
        print(f"cycle {cycle}: v{version} {decision['event']}: {decision['reason']}", flush=True)
    print(f"{args.final} users of the last incumbent ...", flush=True)
    last = users.visit(args.final, "last")
    users.settle()
    return {
        "first": figures(first),
        "cycles": cycles,
        "last": {**figures(last), "incumbent": current_incumbent(url, keys)},
        "last_minus_first": interval_of(rated_values(first), rated_values(last)),
        "seconds": round(time.monotonic() - started),
        "settings": vars(args),
    }


def train(project: Path, args: argparse.Namespace, since: float) -> None:
    command = [
        *TETHER,
        *("train", "--from-sessions", RUN, "--since", f"{since:.3f}", "--project-dir", str(project)),
        *("--model", args.model, "--steps", str(args.train_steps)),
        *args.train_args.split(),
    ]
    print("$ tether " + " ".join(command[3:]), flush=True)
    subprocess.run(command, check=True)


def canaries(url: str, keys: dict[str, str]) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {keys['admin_token']}"}
    found = httpx.get(f"{url}/ui/api/canaries", headers=headers, timeout=60).json()
    return found[0]["decisions"][::-1] if found else []  # oldest first


def wait_for_canary(url: str, keys: dict[str, str], count: int) -> int:
    while True:
        started = [d for d in canaries(url, keys) if d["event"] == "started"]
        if len(started) >= count:
            return int(started[-1]["canary"])
        time.sleep(1)


def decided(url: str, keys: dict[str, str], version: int) -> dict[str, Any] | None:
    time.sleep(3)  # a look of the canary's after the last ratings
    for decision in canaries(url, keys):
        if decision["event"] in ("promoted", "rolled back") and f"v{version}:" in (decision["reason"] or ""):
            return decision
    return None


def current_incumbent(url: str, keys: dict[str, str]) -> int:
    seen = canaries(url, keys)
    return int(seen[-1]["incumbent"]) if seen else 0


def rated_values(visits: list[Visit]) -> list[float]:
    return [1.0 if v.rated == "up" else 0.0 for v in visits if v.rated is not None]


def accuracy(visits: list[Visit]) -> float | None:
    return sum(v.correct for v in visits) / len(visits) if visits else None


def figures(visits: list[Visit]) -> dict[str, Any]:
    rated = rated_values(visits)
    correct = [1.0 if v.correct else 0.0 for v in visits]
    return {
        "sessions": len(visits),
        "rated": len(rated),
        "rating": sum(rated) / len(rated) if rated else None,
        "rating_interval": bootstrap_interval(rated) if rated else None,
        "correct": sum(correct) / len(correct) if correct else None,
        "correct_interval": bootstrap_interval(correct) if correct else None,
    }


def interval_of(before: list[float], after: list[float]) -> dict[str, Any]:
    low, high = difference_interval(before, after)
    return {"difference": sum(after) / len(after) - sum(before) / len(before), "low": low, "high": high}


def print_table(summary: dict[str, Any]) -> None:
    def rate(f: dict[str, Any]) -> str:
        lo, hi = f["rating_interval"] or (0, 0)
        return f"{f['rating']:.3f} [{lo:.3f}, {hi:.3f}] of {f['rated']} rated; correct {f['correct']:.3f}"

    print(f"first version (v0): {rate(summary['first'])}")
    for c in summary["cycles"]:
        comp = c["comparison"] or {}
        print(
            f"cycle {c['cycle']}: v{c['version']} {c['decision']} after {c['sessions']} sessions: canary "
            f"{comp.get('canary_mean')} vs incumbent {comp.get('incumbent_mean')}, interval "
            f"[{comp.get('low')}, {comp.get('high')}]"
        )
    last = summary["last"]
    d = summary["last_minus_first"]
    print(f"last incumbent (v{last['incumbent']}): {rate(last)}")
    print(f"last minus first rating: {d['difference']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
    print(f"{summary['seconds']} s")


if __name__ == "__main__":
    raise SystemExit(main())
