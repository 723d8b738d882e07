"""Tether's warm interpreter (tether/runner/zygote.py), except that it dies right after each fork, before
anything else: the race in which a zygote forks an agent and dies before Tether knows the agent's pid."""

import os
import runpy
from pathlib import Path

ZYGOTE = Path(__file__).resolve().parents[3] / "tether" / "runner" / "zygote.py"
_fork = os.fork


def fork_then_die() -> int:
    pid = _fork()
    if pid != 0:
        os._exit(1)
    os.fork = _fork  # the agent forks as it would anywhere
    return pid


os.fork = fork_then_die
runpy.run_path(str(ZYGOTE), run_name="__main__")
