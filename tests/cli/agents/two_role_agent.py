"""A command agent with two roles, each asking for its own model name (writer, then rewriter)."""

import json
import os
import urllib.request

task = json.loads(os.environ["TETHER_TASK"])
text = task["q"]
for role in ("writer", "rewriter"):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        data=json.dumps(
            {"model": role, "messages": [{"role": "user", "content": text}], "max_tokens": 8}
        ).encode(),
        headers={
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    reply = json.loads(urllib.request.urlopen(request, timeout=60).read())
    text = reply["choices"][0]["message"]["content"] or ""
print(text)
