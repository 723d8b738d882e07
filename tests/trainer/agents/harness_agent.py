"""An agent whose costs are known: it sleeps STARTUP seconds before its one model call (its start-up),
then burns BURN seconds of CPU (its own work outside model calls), then prints the reply."""

import os
import sys
import time

import openai

STARTUP, BURN = float(sys.argv[1]), float(sys.argv[2])

time.sleep(STARTUP)
client = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"])
reply = client.chat.completions.create(
    model="policy", messages=[{"role": "user", "content": "Say something."}], max_tokens=4
)
until = time.process_time() + BURN
while time.process_time() < until:
    pass
print(reply.choices[0].message.content or "")
