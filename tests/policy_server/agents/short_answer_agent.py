"""An ordinary openai-client agent: one short sampled answer to the task's question, printed."""

import json
import os

from openai import OpenAI

task = json.loads(os.environ["TETHER_TASK"])
client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY come from the runner
reply = client.chat.completions.create(
    model="policy", messages=[{"role": "user", "content": task["q"]}], max_tokens=12, temperature=1.0
)
print(reply.choices[0].message.content or "")
