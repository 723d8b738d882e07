"""Fails as agents on tracing libraries do: the exception's traceback, then a library's shutdown lines."""

import sys


def answer() -> None:
    raise RuntimeError("max_output_tokens reached: the reply was cut at 512 tokens")


try:
    answer()
finally:
    sys.stderr.flush()
    import atexit

    atexit.register(lambda: print("[non-fatal] Tracing: max retries reached", file=sys.stderr))
