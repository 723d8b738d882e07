"""Shared by the scripts that run inside bench/.venv-agl (no tether imports here: that venv lacks it).

A reference proxy script writes `ready` (its call path and key) into its folder once it serves, and
answers a `count.req` file by writing `count` (how many records it holds), so the bench can check that
every call it made was recorded without a query loop running during the measurement.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path


def announce(folder: Path, path: str, key: str) -> None:
    (folder / "ready.tmp").write_text(f"{path}\n{key}\n")
    (folder / "ready.tmp").rename(folder / "ready")


def serve_counts(folder: Path, count: Callable[[], int]) -> None:
    def loop() -> None:
        request = folder / "count.req"
        while True:
            if request.exists():
                request.unlink()
                try:
                    value = str(count())
                except Exception as exc:  # noqa: BLE001 - the bench reports it
                    value = f"error: {type(exc).__name__}: {exc}"
                (folder / "count.tmp").write_text(value)
                (folder / "count.tmp").rename(folder / "count")
            time.sleep(0.1)

    threading.Thread(target=loop, daemon=True).start()
