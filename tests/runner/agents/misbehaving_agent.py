"""Agents that go wrong in the ways real ones do, chosen by the first argument."""

import os
import subprocess
import sys
import time
import urllib.request

mode = sys.argv[1]
if mode != "hang":
    from openai import OpenAI
if mode in ("crash", "crash_after_call"):
    if mode == "crash_after_call":
        OpenAI(max_retries=0).chat.completions.create(
            model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=3
        )
    print("Traceback: something broke", file=sys.stderr)
    sys.exit(3)
elif mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(sys.argv[2], "w") as handle:
        handle.write(str(child.pid))
    time.sleep(600)
elif mode == "foreign_token":
    OpenAI(api_key="sk-stolen", max_retries=0).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=3
    )
elif mode == "self_reward":
    OpenAI(max_retries=0).chat.completions.create(
        model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=2
    )
    request = urllib.request.Request(
        os.environ["TETHER_URL"],
        data=b'{"event_type": "reward", "data": {"value": 0.75}}',
        headers={
            "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
            "Content-Type": "application/json",
        },
    )
    urllib.request.urlopen(request).read()
    print("done")
elif mode == "garbage":
    sys.stdout.buffer.write(b"\xff\xfe garbage \x00\n" * 10000)
