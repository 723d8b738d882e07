"""A past revision of this repository as a folder, for the benchmarks that compare code before and after a
change (bench/fairness.py, bench/gateway_ab.py), and a way to run Python against it.

    .venv/bin/python -m bench.trees REV -- python -m bench.gateway_overhead   # a command in REV's tree

`export(rev)` writes `git archive REV` into a temporary folder. A process started by `tree_env` with that
folder as its working directory imports that revision's `tether` (the folder comes first on sys.path,
before the editable install of the working tree) with the project's venv and its packages.
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def resolve(rev: str) -> str:
    """The full commit id of `rev`; a ValueError naming it when the repository has no such revision."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise ValueError(
            f"no revision {rev!r} in {ROOT} (a shallow clone lacks old commits: git fetch --unshallow)"
        )
    return done.stdout.strip()


def export(rev: str, into: Path | None = None) -> Path:
    """REV's files (tracked ones only) in a new folder; returns the folder."""
    commit = resolve(rev)
    folder = into or Path(tempfile.mkdtemp(prefix=f"tether-{commit[:10]}-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", commit], capture_output=True)
    if archive.returncode != 0:
        raise RuntimeError(f"git archive {rev}: {archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "REVISION").write_text(commit + "\n")
    return folder


def tree_env(tree: Path) -> dict[str, str]:
    """The environment of a process that must import `tree`'s tether (start it with cwd=tree too)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tree), env.get("PYTHONPATH", "")]))
    return env


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rev", help="a commit of this repository, e.g. e50142c")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="after --: the command to run in the tree")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else list(args.command)
    if not command:
        parser.error("give the command after --")
    if command[0] == "python":
        command[0] = sys.executable
    tree = export(args.rev)
    print(f"[trees] {args.rev} -> {tree} (removed afterwards)", file=sys.stderr, flush=True)
    try:
        return subprocess.run(command, cwd=tree, env=tree_env(tree)).returncode
    finally:
        shutil.rmtree(tree, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
