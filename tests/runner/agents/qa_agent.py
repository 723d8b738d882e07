"""An ordinary OpenAI-SDK agent: it knows nothing about Tether and reads only the standard variables."""

import json
import os
import sys

from openai import OpenAI

task = json.loads(os.environ["TETHER_TASK"])
client = OpenAI(max_retries=0)
first = client.chat.completions.create(
    model="policy",
    messages=[{"role": "user", "content": task["question"]}],
    max_tokens=int(task.get("max_tokens", 8)),
    temperature=0,
)
messages = [
    {"role": "user", "content": task["question"]},
    {"role": "assistant", "content": first.choices[0].message.content},
    {"role": "user", "content": "Answer again."},
]
client.chat.completions.create(model="policy", messages=messages, max_tokens=4, temperature=0)
print("some log line", file=sys.stderr)
print("thinking...")
print(task.get("say", "final answer"))
