import hashlib


def echoed(task: dict, output: str | None) -> float:
    return float(output == task["q"])


def varied(task: dict, output: str | None) -> float:
    """A reward that differs between any two different answers, so every group has something to learn."""
    digest = hashlib.blake2b((output or "").encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") / 2**32
