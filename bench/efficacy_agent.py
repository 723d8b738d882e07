"""The single-turn arithmetic agent of bench/efficacy.py: one chat call, the answer printed.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... TETHER_TASK='{"question": "..."}' python efficacy_agent.py

A plain OpenAI-client script; nothing here knows Tether. The prompt, the sampling settings and the
answer parsing are defined here once: bench/trl_grpo.py imports them (without `openai`, which the TRL
environment does not have), so TRL trains on exactly these messages and this parsing.
"""

from __future__ import annotations

import json
import os
import re
import sys

SYSTEM = "You solve math word problems. End with 'Answer: NUMBER'."
MAX_TOKENS = 40  # as examples/arith_agent/agent.py
TEMPERATURE = 0.7
ANSWER = re.compile(r"Answer:\s*(-?\d+(?:\.\d+)?)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def messages(question: str) -> list[dict[str, str]]:
    """The conversation sent for one problem (TRL's conversational prompt is the same list)."""
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


def final_answer(text: str) -> str:
    """The number after 'Answer:', else the last number in the text, else ''."""
    match = ANSWER.search(text)
    if match:
        return match.group(1)
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else ""


def solve(question: str) -> str:
    from openai import OpenAI

    client = OpenAI(max_retries=2)
    reply = client.chat.completions.create(
        model=os.environ.get("OPENAI_MODEL", "policy"),
        messages=messages(question),  # type: ignore[arg-type]
        max_tokens=MAX_TOKENS,
        temperature=TEMPERATURE,
    )
    return final_answer(reply.choices[0].message.content or "")


if __name__ == "__main__":
    task = json.loads(os.environ.get("TETHER_TASK", "{}"))
    print(solve(task.get("question") or " ".join(sys.argv[1:])))
