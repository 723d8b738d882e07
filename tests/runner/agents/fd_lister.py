"""An agent that reports the descriptors it holds (not the one that lists them), after waiting WAIT_S
seconds (so that a test can look at the warm folder while it runs)."""

import json
import os
import sys
import time

time.sleep(float(sys.argv[1]))
held = []
for name in os.listdir("/proc/self/fd"):
    try:
        os.readlink(f"/proc/self/fd/{name}")  # the listing's own descriptor is closed by now
    except OSError:
        continue
    held.append(int(name))
print(json.dumps({"fds": sorted(held)}))
