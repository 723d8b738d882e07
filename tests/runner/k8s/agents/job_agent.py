"""An ordinary agent for the Kubernetes tests: one chat call through OPENAI_BASE_URL, then the task's
`say` on stdout (or an exit with the task's `exit` code). It reads only the standard variables."""

import json
import os
import sys
import time
import urllib.request

task = json.loads(os.environ["TETHER_TASK"])
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps(
        {"model": "policy", "messages": [{"role": "user", "content": task["q"]}], "max_tokens": 4}
    ).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
)
urllib.request.urlopen(request, timeout=30).read()
time.sleep(float(task.get("sleep", 0)))
if task.get("exit"):
    print(f"giving up on {task['q']}", file=sys.stderr)
    sys.exit(int(task["exit"]))
print(task.get("say", task["q"]))
