"""An agent that only traces; its tracing destination may be down, and it must not notice."""

from tether.tracing import span, traced


@traced()
def step(index: int) -> int:
    with span("inner", index=index):
        return index * 2


def main() -> None:
    for episode in range(3):
        with span("episode", episode=episode):
            step(episode)
    with span("final"):
        step(9)
    print("agent finished")


if __name__ == "__main__":
    main()
