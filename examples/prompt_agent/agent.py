"""A plain agent with a hard-coded system prompt: one chat call, the answer on stdout.

It knows nothing about Tether or prompt optimization; `tether optimize-prompt` changes what its system
message says through the gateway. Standard library only, so that it starts fast.
"""

import json
import os
import sys
import urllib.request

SYSTEM = "You are a helpful assistant. Answer with one word."


def main() -> int:
    task = json.loads(os.environ.get("TETHER_TASK") or "{}")
    body = {
        "model": os.environ.get("OPENAI_MODEL", "policy"),
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": task.get("question", "")},
        ],
        "max_tokens": 16,
    }
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        answer = json.loads(response.read())["choices"][0]["message"]["content"] or ""
    print(answer.strip().splitlines()[-1] if answer.strip() else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
