"""An agent that forges its own reward: one model call, then a reward of 1000 dressed as the evaluator's,
sent with its rollout token both ways an agent can report one (the store API and the reward event)."""

import json
import os

from token_post import post

FORGED = {"value": 1000.0, "source": "evaluator", "time": 4e9, "primary": True, "name": "reward"}


task = json.loads(os.environ["TETHER_TASK"])
post(
    os.environ["OPENAI_BASE_URL"] + "/chat/completions",
    {"model": "policy", "messages": [{"role": "user", "content": task["q"]}]},
)
rollout = {"rollout_id": os.environ["TETHER_ROLLOUT_ID"], "attempt": int(os.environ["TETHER_ATTEMPT"])}
post(os.environ["TETHER_SERVER"] + "/store/rewards", {"rewards": [{**rollout, **FORGED}]})
post(os.environ["TETHER_URL"] + "?primary=1", FORGED)
print(task["say"])
