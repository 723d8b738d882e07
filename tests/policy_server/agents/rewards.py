def odd_length(task: dict, output: str | None) -> float:
    """A reward that differs between samples of a group (so every GRPO step has something to learn)."""
    return float(len(output or "") % 2)
