"""Which distribution a call's tokens were drawn from, and so which distribution its recorded logprobs are
under: the behaviour policy mu that the learner's importance ratio divides by.

The built-in engine draws from the *processed* distribution: logits divided by the temperature, then kept
to the top-k tokens and to the top-p nucleus, renormalized (`tether.engines.sampling`), and records each
token's log-probability under exactly that distribution. The learner scores a sample with the same
transformation of its own logits, so that the ratio at the start of an update is 1 up to numerics.

A `Sampler` travels from the gateway's span (`CallAttr.SAMPLING`) to the transition. `exact` says the
recorded logprobs are known to be under it (the built-in engine; a vLLM server whose `--logprobs-mode` is
`processed_logprobs`). A sampler the learner cannot reproduce is refused for RL (`rl_problem`): greedy
decoding (a point mass no softmax reproduces) and logprobs of unverified provenance.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Sampler:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0  # 1: no nucleus cut
    top_k: int = 0  # 0: no top-k cut
    exact: bool = True  # the recorded logprobs are under this distribution (verified)

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
        if not self.exact:
            parts.append("unverified logprobs")
        return ", ".join(parts)

    def to_attr(self) -> dict[str, Any]:
        return asdict(self)

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
        )


RAW = Sampler()  # the softmax of the raw logits


def sampler_problems(samplers: dict[str, Sampler]) -> str | None:
    """One message naming every sampler (keyed by where it was used) an RL learner must refuse."""
    bad = {where: s for where, s in samplers.items() if s.rl_problem() is not None}
    if not bad:
        return None
    where, first = next(iter(bad.items()))
    return (
        f"{len(bad)} call(s) were sampled in a way RL cannot train on, e.g. {where} ({first.describe()}): "
        f"{first.rl_problem()}. Force the training calls' sampling with --train-temperature (e.g. 1.0), "
        "train only other agents (--train-agent), or serve them as fixed (--fixed-agent)"
    )
