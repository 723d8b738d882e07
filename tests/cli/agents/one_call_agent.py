"""An ordinary agent for the CLI tests: one chat call, a short think, the task's answer on stdout."""

import json
import os
import sys
import time
import urllib.request

task = json.loads(os.environ["TETHER_TASK"])
request = urllib.request.Request(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    data=json.dumps({"model": "policy", "messages": [{"role": "user", "content": task["q"]}]}).encode(),
    headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
)
urllib.request.urlopen(request, timeout=30).read()
time.sleep(float(task.get("sleep", 0.3)))
print(task["q"], file=sys.stdout)
