"""DSPy: `dspy.LM("openai/...")` (LiteLLM underneath), a Predict and a ReAct agent."""

from __future__ import annotations

import dspy
from tools import get_weather


def _configure() -> None:
    dspy.configure(lm=dspy.LM("openai/gpt-4o-mini"))


def predict(question: str) -> str:
    _configure()
    return str(dspy.Predict("question -> answer")(question=question).answer)


def react(question: str) -> str:
    _configure()
    return str(dspy.ReAct("question -> answer", tools=[get_weather], max_iters=2)(question=question).answer)
