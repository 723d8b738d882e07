"""An agent on the `openai` client for the --agent-warm CLI test: one chat call, then the task's question
and whether `openai` was loaded before this script imported it (a warm start) on stdout."""

import sys

PRELOADED = "openai" in sys.modules

import json  # noqa: E402
import os  # noqa: E402

from openai import OpenAI  # noqa: E402

task = json.loads(os.environ["TETHER_TASK"])
OpenAI(max_retries=0).chat.completions.create(
    model="policy", messages=[{"role": "user", "content": task["q"]}], max_tokens=8
)
print("warm" if PRELOADED else "cold", task["q"])
