def echoed(task: dict, output: str | None) -> float:
    return float(output == task["q"])


def length(task: dict, output: str | None) -> float:
    """Random text differs in length: every group's rewards vary, so every step updates."""
    return float(len(output or ""))
