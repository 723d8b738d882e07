"""What an agent sends is the agent's, whatever it claims. Rewards and spans that arrive with a rollout
token (the store API, the gateway's reward events, the OTLP receiver) pass through here: the server sets
their origin, time and primacy, never the body. Only the runner and the admin write evaluator, AIR and
operator rewards, and only the gateway records model-call spans with origin `gateway`."""

from __future__ import annotations

from tether.contracts import Origin
from tether.store.models import Reward, Span, now

DEFAULT_REWARD_NAME = "reward"


def agent_reward(reward: Reward) -> Reward:
    """The reward as the agent's own verdict: source `agent`, the server's time, primary only when it is
    named `reward` (any other name is a side metric)."""
    return reward.model_copy(
        update={"source": Origin.AGENT, "time": now(), "primary": reward.name == DEFAULT_REWARD_NAME}
    )


def agent_span(span: Span) -> Span:
    return span if span.origin == Origin.AGENT else span.model_copy(update={"origin": Origin.AGENT})
