"""An agent that does what its task says (`mode`): echo the question, crash, or hang. Every run appends
its rollout and attempt to the task's `log` file, so a test can count how often each rollout ran."""

import json
import os
import sys
import time

task = json.loads(os.environ["TETHER_TASK"])
with open(task["log"], "a") as log:
    log.write(f"{os.environ['TETHER_ROLLOUT_ID']} {os.environ['TETHER_ATTEMPT']}\n")
mode = task.get("mode", "echo")
if mode == "crash":
    print("Traceback (most recent call last): the agent broke", file=sys.stderr)
    sys.exit(3)
if mode == "hang":
    time.sleep(600)
print(task["q"])
