"""Which distribution a call's tokens were drawn from, and so which distribution its recorded logprobs are
under: the behaviour policy mu that the learner's importance ratio divides by.

The built-in engine draws from the *processed* distribution: logits divided by the temperature, then kept
to the top-k tokens and to the top-p nucleus, renormalized (`tether.engines.sampling`), and records each
token's log-probability under exactly that distribution. The learner scores a sample with the same
transformation of its own logits, so that the ratio at the start of an update is 1 up to numerics.

A `Sampler` travels from the gateway's span (`CallAttr.SAMPLING`) to the transition. `exact` says the
recorded logprobs are known to be under it (the built-in engine; a vLLM server whose `--logprobs-mode` is
`processed_logprobs`). A sampler the learner cannot reproduce is refused for RL (`rl_problem`): greedy
decoding (a point mass no softmax reproduces), logprobs of unverified provenance, and request parameters
that reshape the distribution beyond temperature, top-p and top-k (`unreproducible_parameters`: penalties,
logit bias, min-p, ...), which an upstream applies and the learner does not.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Sampler:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0  # 1: no nucleus cut
    top_k: int = 0  # 0: no top-k cut
    exact: bool = True  # the recorded logprobs are under this distribution (verified)
    # Request parameters that also shaped the distribution and that the learner does not apply, as
    # `name=value` or `name` (`unreproducible_parameters`): empty for a reproducible sampler.
    unreproducible: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    @property
    def processed(self) -> bool:
        """Whether the distribution differs from the raw softmax of the logits."""
        return self.temperature != 1.0 or self.top_p < 1.0 or self.top_k > 0

    def rl_problem(self) -> str | None:
        """Why an RL learner cannot use tokens drawn by this sampler, or None."""
        if self.greedy:
            return (
                "greedy decoding (temperature 0): its distribution is a point mass that no softmax reproduces"
            )
        if self.unreproducible:
            return (
                f"sampling parameters the learner does not reproduce ({', '.join(self.unreproducible)}): "
                "it scores temperature, top_p and top_k only, so the recorded logprobs are not under the "
                "distribution it would divide by"
            )
        if not self.exact:
            return (
                "logprobs the upstream does not certify as the sampling distribution's (an HTTP upstream "
                "that is not a vLLM server in --logprobs-mode processed_logprobs)"
            )
        return None

    def describe(self) -> str:
        parts = [f"temperature {self.temperature:g}", f"top_p {self.top_p:g}"]
        if self.top_k:
            parts.append(f"top_k {self.top_k}")
        parts += self.unreproducible
        if not self.exact:
            parts.append("unverified logprobs")
        return ", ".join(parts)

    def to_attr(self) -> dict[str, Any]:
        attr = asdict(self)
        if self.unreproducible:
            attr["unreproducible"] = list(self.unreproducible)
        else:
            del attr["unreproducible"]  # spans of reproducible calls keep their earlier shape
        return attr

    @classmethod
    def from_attr(cls, value: Any) -> Sampler:
        """The span attribute back as a Sampler. Spans recorded before samplers were recorded carry
        none: their logprobs are the raw log-softmax (what the engine recorded then), i.e. `RAW`."""
        if not isinstance(value, dict):
            return RAW
        return cls(
            temperature=float(value.get("temperature", 1.0)),
            top_p=float(value.get("top_p", 1.0)),
            top_k=int(value.get("top_k", 0) or 0),
            exact=bool(value.get("exact", True)),
            unreproducible=tuple(str(v) for v in value.get("unreproducible") or () if isinstance(v, str)),
        )


RAW = Sampler()  # the softmax of the raw logits


def sampler_problems(samplers: dict[str, Sampler]) -> str | None:
    """One message naming every sampler (keyed by where it was used) an RL learner must refuse."""
    bad = {where: s for where, s in samplers.items() if s.rl_problem() is not None}
    if not bad:
        return None
    where, first = next(iter(bad.items()))
    fix = (
        "Leave those parameters out of the training calls (or send them neutral)"
        if first.unreproducible and not first.greedy
        else "Force the training calls' sampling with --train-temperature (e.g. 1.0)"
    )
    return (
        f"{len(bad)} call(s) were sampled in a way RL cannot train on, e.g. {where} ({first.describe()}): "
        f"{first.rl_problem()}. {fix}, train only other agents (--train-agent), or serve them as fixed "
        "(--fixed-agent)"
    )


# -- request parameters beyond temperature, top-p and top-k ---------------------------------------------


def _number_is(neutral: float) -> Callable[[Any, dict[str, Any]], bool]:
    def check(value: Any, body: dict[str, Any]) -> bool:
        return (
            isinstance(value, int | float) and not isinstance(value, bool) and float(value) == neutral
        ) or (neutral == 0 and value is False)

    return check


def _empty(value: Any, body: dict[str, Any]) -> bool:
    if isinstance(value, dict):  # logit_bias: {} or every bias 0
        return all(isinstance(v, int | float) and not isinstance(v, bool) and v == 0 for v in value.values())
    return isinstance(value, list | tuple | str) and not value


def _no_selection(value: Any, body: dict[str, Any]) -> bool:
    """`best_of` no larger than `n`: every sequence generated is returned, none picked by likelihood."""
    n = body.get("n") or 1
    return isinstance(value, int) and not isinstance(value, bool) and isinstance(n, int) and value <= n


# Request parameters (the OpenAI API's, vLLM's, llama.cpp's and OpenRouter's extensions) that change which
# tokens are drawn beyond temperature, top-p and top-k, each with the test of its neutral value. Absent or
# null is always neutral.
_PARAMETERS: dict[str, Callable[[Any, dict[str, Any]], bool]] = {
    "frequency_penalty": _number_is(0.0),
    "presence_penalty": _number_is(0.0),
    "repetition_penalty": _number_is(1.0),
    "logit_bias": _empty,
    "min_p": _number_is(0.0),
    "typical_p": _number_is(1.0),
    "top_a": _number_is(0.0),
    "tfs_z": _number_is(1.0),
    "mirostat": _number_is(0.0),
    "mirostat_mode": _number_is(0.0),
    "dry_multiplier": _number_is(0.0),
    "xtc_probability": _number_is(0.0),
    "min_tokens": _number_is(0.0),
    "bad_words": _empty,
    "allowed_token_ids": _empty,
    "logits_processors": _empty,
    "use_beam_search": _number_is(0.0),
    "best_of": _no_selection,
}


def unreproducible_parameters(body: dict[str, Any]) -> tuple[str, ...]:
    """The request's parameters that reshape the sampling distribution in a way the learner does not
    reproduce, each as `name=value` (a number) or `name`; empty when every one is absent or neutral."""
    found = []
    for name, neutral in _PARAMETERS.items():
        value = body.get(name)
        if value is None or neutral(value, body):
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        found.append(f"{name}={value:g}" if number else name)
    return tuple(found)
