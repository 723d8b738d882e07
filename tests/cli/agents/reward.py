def echoed(task: dict, output: str | None) -> float:
    return float(output == task["q"])
