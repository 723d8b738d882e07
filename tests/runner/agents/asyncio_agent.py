"""An agent whose event loop starts inside a function, so a warm interpreter learns `asyncio` (and its C
accelerator `_asyncio`) from its first run: prints whether asyncio knows the task it runs in."""


def main() -> None:
    import asyncio

    async def in_a_task() -> bool:
        return asyncio.current_task() is not None

    print(asyncio.run(in_a_task()))


main()
