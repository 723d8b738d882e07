"""An agent whose time is its own work: a tool that sleeps, no model call; echoes the task's question."""

import json
import os
import time

task = json.loads(os.environ["TETHER_TASK"])
time.sleep(float(task.get("sleep", 1.0)))
print(task["q"])
