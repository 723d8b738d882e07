"""vLLM's settings and its command-line group; importing this starts and imports nothing of vLLM."""

from __future__ import annotations

from dataclasses import dataclass

ENGINE_ENV = "TETHER_ENGINE"


@dataclass(frozen=True)
class VLLMOptions:
    # The URLs of servers the user started (`--policy-server`), else how many Tether starts, with which
    # Python, extra arguments and first port (0: free ones).
    urls: tuple[str, ...] = ()
    replicas: int = 1
    python: str | None = None
    args: tuple[str, ...] = ()
    port: int = 0
