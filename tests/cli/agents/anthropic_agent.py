"""An agent on the official anthropic SDK, configured only by its environment, as such agents are."""

import json
import os

import anthropic

reply = anthropic.Anthropic(max_retries=0).messages.create(
    model="policy", max_tokens=8, messages=[{"role": "user", "content": "Say hello."}]
)
seen = {name: os.environ.get(name) for name in ("GROQ_API_KEY", "GEMINI_API_KEY")}
print(json.dumps({"type": reply.type, "seen": seen}))
