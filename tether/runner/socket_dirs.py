"""Where Tether's folders that hold Unix sockets go (warm agents' zygotes, the sandbox's gateway relay).

A socket's path is at most 107 bytes. Below a long TMPDIR (a CI job's or a test's temporary folder)
those folders' sockets would not fit, and every agent would fail to start; they go to /tmp then.
"""

from __future__ import annotations

import os
import tempfile

UNIX_PATH_MAX = 107
# What Tether adds below the base: `/tether-sandbox-warm-XXXXXXXX/tmpXXXXXXXX/zygote.sock` and room.
SOCKET_SUFFIX_BYTES = 56
FALLBACKS = ("/tmp", "/dev/shm")


def socket_parent() -> str:
    """The temporary directory, or the first of FALLBACKS when its path is too long for a socket below it."""
    base = tempfile.gettempdir()
    if fits(base):
        return base
    for fallback in FALLBACKS:
        if fits(fallback) and os.access(fallback, os.W_OK | os.X_OK):
            return fallback
    raise OSError(
        f"the temporary directory {base!r} is too long for a Unix socket below it, and neither "
        f"{' nor '.join(FALLBACKS)} is writable: set TMPDIR to a shorter path"
    )


def fits(base: str) -> bool:
    return len(os.fsencode(base)) + SOCKET_SUFFIX_BYTES <= UNIX_PATH_MAX
