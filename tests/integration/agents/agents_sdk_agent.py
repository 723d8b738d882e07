"""An OpenAI Agents SDK agent for the warm-start framework test: one Agent on the chat completions model.
It prints whether the SDK was loaded before this script imported it (a warm start), then the task."""

import sys

PRELOADED = "agents" in sys.modules

import json  # noqa: E402
import os  # noqa: E402

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

set_tracing_disabled(True)  # the SDK would otherwise export its traces to the hosted platform
task = json.loads(os.environ["TETHER_TASK"])
model = OpenAIChatCompletionsModel(model="policy", openai_client=AsyncOpenAI(max_retries=0))
result = Runner.run_sync(Agent(name="plain", instructions="Answer briefly.", model=model), task["q"])
print("warm" if PRELOADED else "cold", task["q"], bool(result.final_output))
