"""What an agent sends is the agent's, whatever it claims. Rewards and spans that arrive with a rollout
token (the store API, the gateway's reward events, the OTLP receiver) pass through here: the server sets
their origin, time, primacy and attempt (the token's), never the body. Only the runner and the admin
write evaluator, AIR and operator rewards, and only the gateway records model-call spans with origin
`gateway`."""

from __future__ import annotations

from tether.contracts import Origin
from tether.store.records import Reward, Span, now

DEFAULT_REWARD_NAME = "reward"


def agent_reward(reward: Reward, attempt: int | None = None) -> Reward:
    """The reward as the agent's own verdict: source `agent`, the server's time, primary only when it is
    named `reward` (any other name is a side metric), and the attempt of the token that sent it."""
    update = {"source": Origin.AGENT, "time": now(), "primary": reward.name == DEFAULT_REWARD_NAME}
    return reward.model_copy(update=update if attempt is None else {**update, "attempt": attempt})


def agent_span(span: Span, attempt: int | None = None) -> Span:
    """The span as the agent's: origin `agent`, and the attempt of the token that sent it."""
    if span.origin == Origin.AGENT and attempt in (None, span.attempt):
        return span
    update: dict[str, object] = {"origin": Origin.AGENT}
    return span.model_copy(update=update if attempt is None else {**update, "attempt": attempt})
