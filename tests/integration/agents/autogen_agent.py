"""An AutoGen AgentChat agent for the warm-start framework test: an AssistantAgent on autogen-ext's
OpenAI client. It prints whether AutoGen was loaded before this script imported it, then the task."""

import sys

PRELOADED = "autogen_agentchat.agents" in sys.modules

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_core.models import ModelFamily, ModelInfo  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402

INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    structured_output=False,
    family=ModelFamily.UNKNOWN,
)


async def main() -> None:
    task = json.loads(os.environ["TETHER_TASK"])
    client = OpenAIChatCompletionClient(
        model="policy",
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ["OPENAI_API_KEY"],
        model_info=INFO,
        max_retries=0,
    )
    try:
        result = await AssistantAgent("plain", model_client=client).run(task=task["q"])
    finally:
        await client.close()
    print("warm" if PRELOADED else "cold", task["q"], bool(result.messages[-1].content))


asyncio.run(main())
