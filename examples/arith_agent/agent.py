"""A math agent with a calculator tool. It is an ordinary OpenAI-client script: nothing here knows Tether.

The model may write calc(EXPRESSION); this script evaluates it, shows the result, and lets the model
continue. The last line printed is the final answer.

    OPENAI_BASE_URL=... OPENAI_API_KEY=... python agent.py "Tom has 3 apples and buys 4 more. How many?"
"""

from __future__ import annotations

import ast
import json
import operator
import os
import re
import sys

from openai import OpenAI

SYSTEM = (
    "You solve math word problems. You have a calculator: write calc(EXPRESSION), for example calc(12+7), "
    "and you will be told the result. End with 'Answer: NUMBER'."
)
MAX_TURNS = 3
CALC = re.compile(r"calc\(([^()]*)\)")
ANSWER = re.compile(r"Answer:\s*(-?\d+(?:\.\d+)?)")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculate(expression: str) -> str:
    """Evaluate + - * / on numbers only; anything else is an error the model gets to see."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise ValueError("unsupported expression")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as exc:
        return f"error: {exc}"
    return str(int(result)) if float(result).is_integer() else f"{result:.4g}"


def final_answer(text: str) -> str:
    match = ANSWER.search(text)
    if match:
        return match.group(1)
    numbers = NUMBER.findall(text)
    return numbers[-1] if numbers else ""


def solve(question: str) -> str:
    client = OpenAI(max_retries=2)
    model = os.environ.get("OPENAI_MODEL", "policy")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
    text = ""
    for _ in range(MAX_TURNS):
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=40, temperature=0.7)
        text = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": text})
        call = CALC.search(text)
        if call is None or ANSWER.search(text):
            break
        messages.append({"role": "user", "content": f"calc({call.group(1)}) = {calculate(call.group(1))}"})
    return final_answer(text)


if __name__ == "__main__":
    task = json.loads(os.environ.get("TETHER_TASK", "{}"))
    question = task.get("question") or " ".join(sys.argv[1:])
    print(solve(question))
