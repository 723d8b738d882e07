"""A LangGraph agent for the warm-start framework test: a one-node graph around ChatOpenAI. It prints
whether LangGraph was loaded before this script imported it (a warm start), then the model's answer."""

import sys

PRELOADED = "langgraph.graph" in sys.modules

import json  # noqa: E402
import os  # noqa: E402

from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402

task = json.loads(os.environ["TETHER_TASK"])
model = ChatOpenAI(model="policy", max_retries=0, max_tokens=8)
graph = StateGraph(MessagesState)
graph.add_node("model", lambda state: {"messages": [model.invoke(state["messages"])]})
graph.add_edge(START, "model")
graph.add_edge("model", END)
result = graph.compile().invoke({"messages": [("user", task["q"])]})
print("warm" if PRELOADED else "cold", task["q"], bool(result["messages"][-1].content))
