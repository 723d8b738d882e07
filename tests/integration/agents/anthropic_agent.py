"""An agent on the Anthropic SDK for the warm-start framework test: one Messages call, which the gateway
translates. It prints whether the SDK was loaded before this script imported it, then the task."""

import sys

PRELOADED = "anthropic" in sys.modules

import json  # noqa: E402
import os  # noqa: E402

import anthropic  # noqa: E402

task = json.loads(os.environ["TETHER_TASK"])
sdk = anthropic.Anthropic(
    base_url=os.environ["OPENAI_BASE_URL"].removesuffix("/v1"),
    api_key=os.environ["OPENAI_API_KEY"],
    max_retries=0,
)
message = sdk.messages.create(model="policy", max_tokens=8, messages=[{"role": "user", "content": task["q"]}])
print("warm" if PRELOADED else "cold", task["q"], bool(message.content))
