"""Private files: the project's secret, admin token and store (every prompt and response) are readable
by their owner only, in a directory only the owner can enter. Looser modes found on disk are tightened,
with a warning, because an agent running as the same user elsewhere on the machine could read them."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def make_private(path: Path, mode: int = PRIVATE_FILE) -> None:
    """Give `path` (if it exists) at most `mode`; warn when it had more."""
    try:
        current = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        return
    if current & ~mode:
        log.warning("%s was mode %o, readable beyond its owner: tightening it to %o", path, current, mode)
        os.chmod(path, current & mode)


def private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    make_private(path, PRIVATE_DIR)
    return path
