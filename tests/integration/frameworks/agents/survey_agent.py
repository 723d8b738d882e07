"""One framework's documented default, run as a Tether agent: the framework is configured the way its
quick start shows, from the environment Tether gives every agent (no base URL or key in the code where
the framework reads them itself), given the task's question, and its answer printed.

`python survey_agent.py FRAMEWORK`: FRAMEWORK names a module of this folder and a function in it
(`pydantic_ai_agents:openai_agent`). The tiny random model answers nonsense, so a framework may give up
after its retries: the survey checks the calls it made, not its answer."""

from __future__ import annotations

import importlib
import json
import os
import sys


def main() -> None:
    module_name, _, function_name = sys.argv[1].partition(":")
    question = json.loads(os.environ["TETHER_TASK"])["q"]
    run = getattr(importlib.import_module(module_name), function_name)
    try:
        answer = run(question)
    except Exception as exc:  # noqa: BLE001 - the nonsense model's answers may fail the framework's parsing
        answer = f"the framework gave up: {type(exc).__name__}: {str(exc)[:300]}"
        print(f"{sys.argv[1]}: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
    print(json.dumps({"framework": sys.argv[1], "answer": str(answer)[:200]}))


if __name__ == "__main__":
    main()
