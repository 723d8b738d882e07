"""A plain agent that knows nothing about Tether: it reads the standard OpenAI environment variables.

export OPENAI_BASE_URL=... OPENAI_API_KEY=...   # printed by `tether serve`
python examples/hello_agent.py "What is 2 + 3?"
"""

import sys

from openai import OpenAI


def main() -> None:
    question = " ".join(sys.argv[1:]) or "What is 2 + 3?"
    client = OpenAI()
    messages = [{"role": "user", "content": question}]
    reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=48, temperature=0.7)
    print("agent asked:", question)
    print("model said: ", reply.choices[0].message.content)
    stream = client.chat.completions.create(
        model="policy", messages=messages, max_tokens=48, temperature=0.7, stream=True
    )
    print("streamed:   ", "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices))


if __name__ == "__main__":
    main()
