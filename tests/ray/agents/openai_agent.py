"""An ordinary openai-client agent: one chat call with the task's question (streamed when the task says
so), the answer on stdout."""

import json
import os

from openai import OpenAI

task = json.loads(os.environ["TETHER_TASK"])
client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the environment
messages = [{"role": "user", "content": task["q"]}]
if task.get("stream"):
    chunks = client.chat.completions.create(model="policy", messages=messages, max_tokens=8, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
else:
    answer = client.chat.completions.create(model="policy", messages=messages, max_tokens=8)
    text = answer.choices[0].message.content or ""
print(repr(text))
