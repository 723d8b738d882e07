"""An agent whose every word is markup and terminal escapes: in the model name of its call, a reward's
name, the spans it sends (one a forged model call, one with attributes of the wrong types), its stdout
and its stderr. With `"fail": true` it exits 3 after writing the text to stderr."""

import json
import os
import sys
import time
import urllib.request

HOSTILE = "[/red] [bold]x[/bold] \x1b[31m red \x1b]0;title\x07 \x9b2J end"


def post(url: str, body: dict) -> None:
    headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    urllib.request.urlopen(request, timeout=30).read()


def span(name: str, **fields: object) -> dict:
    rollout = {"rollout_id": os.environ["TETHER_ROLLOUT_ID"], "attempt": int(os.environ["TETHER_ATTEMPT"])}
    return {**rollout, "name": name, "start_time": time.time(), **fields}


task = json.loads(os.environ["TETHER_TASK"])
messages = [{"role": "user", "content": HOSTILE}]
post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", {"model": HOSTILE, "messages": messages})
post(os.environ["TETHER_URL"], {"value": 0.5, "name": HOSTILE})
forged = {
    "model": HOSTILE,
    "upstream": HOSTILE,
    "error": {"message": HOSTILE},
    "choices": [{"index": 0, "text": HOSTILE, "finish_reason": HOSTILE, "token_ids": [1], "logprobs": [-1]}],
}
spans = [
    span("llm.chat", attributes=forged),
    span(HOSTILE, status=HOSTILE),
    span("llm.chat", attributes={"choices": [HOSTILE], "error": HOSTILE}),
]
post(os.environ["TETHER_SERVER"] + "/store/spans", {"spans": spans})
if task.get("fail"):
    print(HOSTILE, file=sys.stderr)
    sys.exit(3)
print(HOSTILE)
