"""What the gateway checks in a model call's body before the model runs. An agent under training is an
adversary, and one call must not hurt the others:

- nesting: a body nested deeper than `MAX_JSON_DEPTH` is refused, since its span (which holds the body)
  would fail the store's commit it shares with other rollouts' calls;
- caps: a call asking for a billion tokens or dozens of choices would take the engine from every other
  rollout. More choices than the cap are refused with a 400 that names the field and the cap (fewer
  would be a different answer). A token count above the cap is lowered to it, as the built-in engine
  lowers one above the room left in the model's context: it is a bound, not a length (an answer that
  reaches it ends with finish reason "length", as it would at the agent's own bound), and frameworks
  send their model's largest output by default (pydantic-ai's Anthropic models 64,000). The call's span
  records what was asked (`lowered`).
"""

from __future__ import annotations

from typing import Any

from tether.gateway.errors import GatewayError
from tether.limits import MAX_JSON_DEPTH, few_brackets, nests_deeper

# The capped fields of each model-call route, in the route's own API: (field, which cap).
CAPPED_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "chat": (("max_tokens", "tokens"), ("max_completion_tokens", "tokens"), ("n", "choices")),
    "completions": (("max_tokens", "tokens"), ("n", "choices"), ("best_of", "choices")),
    "responses": (("max_output_tokens", "tokens"),),
    "messages": (("max_tokens", "tokens"),),
}
CAP_OPTIONS = {"tokens": "--max-tokens-cap", "choices": "--n-cap"}


def check_depth(raw: bytes, body: Any, limit: int = MAX_JSON_DEPTH) -> None:
    if not few_brackets(raw, limit) and nests_deeper(body, limit):
        raise GatewayError(400, f"the request body nests deeper than {limit} levels", code="too_deep")


def check_caps(kind: str, body: dict[str, Any], max_tokens: int, n: int) -> dict[str, Any]:
    """Refuse a request whose choice count is above its cap; lower a token count above its cap to the cap
    (in `body`), and return what was asked of each lowered field. A value of the wrong type is left to the
    upstream's own checks."""
    lowered: dict[str, Any] = {}
    for name, cap_kind in CAPPED_FIELDS[kind]:
        value = body.get(name)
        if value is None or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        cap = max_tokens if cap_kind == "tokens" else n
        if value > cap and cap_kind == "tokens":
            lowered[name], body[name] = value, cap
        elif value > cap:
            raise GatewayError(
                400,
                f"'{name}' is {value}, above this gateway's cap of {cap} (raise it with "
                f"{CAP_OPTIONS[cap_kind]} of tether serve, rollout, train or optimize-prompt)",
                code="integer_above_max_value",
                param=name,
            )
    return lowered
