"""An agent using Tether's built-in tracer, configured only by the environment Tether gives it."""

import asyncio

from tether.tracing import emit_reward, span, traced


@traced()
def search(query: str) -> list[str]:
    return [query.upper()]


@traced("llm.think")
async def think() -> str:
    async with span("llm.inner", tokens=12) as inner:
        inner.add_event("first_token", position=0)
    return "thought"


def main() -> None:
    with span("agent.run", task="find cats") as root:
        root.set_attribute("hits", len(search("cats")))
        asyncio.run(think())
        try:
            with span("tool:fetch", url="http://example.invalid"):
                raise ConnectionError("fetch failed")
        except ConnectionError:
            pass
        with span("grade"):
            emit_reward(0.75)
        emit_reward(1.0, "format", primary=False)


if __name__ == "__main__":
    main()
