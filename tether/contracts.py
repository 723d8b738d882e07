"""Names shared across packages, defined once: span names and attributes, rollout metadata keys, the
task's evaluator-only field, the training algorithms, and the environment variables secrets are read
from. The gateway writes what the adapters, the runner and the CLI read back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

# -- spans --------------------------------------------------------------------------------------------

LLM_SPAN_PREFIX: Final = "llm."  # every model call's span name starts with it
LLM_CHAT_SPAN: Final = "llm.chat"
LLM_COMPLETIONS_SPAN: Final = "llm.completions"
CALL_SPAN_NAMES: Final[dict[str, str]] = {"chat": LLM_CHAT_SPAN, "completions": LLM_COMPLETIONS_SPAN}


JUDGE_SPAN: Final = "judge.chat"  # a judge's call, recorded with the rollout it scored; not a model call


def is_call_span(name: str) -> bool:
    return name.startswith(LLM_SPAN_PREFIX)


class SpanStatus:
    OK: Final = "ok"
    ERROR: Final = "error"
    ABORTED: Final = "aborted"  # a stream the agent left: recorded as generated until then


class Origin:
    """Who recorded a span, or who gave a reward (`Reward.source`)."""

    GATEWAY: Final = "gateway"  # spans: a model call the gateway served and recorded itself
    AGENT: Final = "agent"  # spans and rewards an agent sent with its rollout token
    EVALUATOR: Final = "evaluator"  # rewards: the run's evaluator, written by the runner
    AIR: Final = "air"  # rewards: automatic intermediate rewards, written by the runner
    JUDGE: Final = "judge"  # spans: an LLM judge's calls while it scored a rollout (never trained on)
    RUNNER: Final = "runner"  # spans: what a failed agent printed (`AGENT_OUTPUT_SPAN`), for its operator


AGENT_OUTPUT_SPAN: Final = "agent.output"  # a failed attempt's stdout and stderr (their ends), exit code
# A model call the gateway refused before any upstream answered it (a cap, a field the engine cannot
# honour): its request and error, origin gateway, charged to the agent's span quota. Not a call span.
REFUSED_CALL_SPAN: Final = "gateway.refused"


class CallAttr:
    """Attributes of a model-call span, as the gateway records them."""

    CALL: Final = "call"  # "chat" or "completions"
    MODEL: Final = "model"  # the model alias the agent asked for
    AGENT: Final = "agent"
    AGENT_SOURCE: Final = "agent_source"  # "header", "trace" or "model"
    UPSTREAM: Final = "upstream"
    STREAM: Final = "stream"
    LATENCY_MS: Final = "latency_ms"
    REQUEST: Final = "request"  # the request as the agent sent it
    API: Final = "api"  # "responses" or "messages" for translated calls
    CHAT_REQUEST: Final = "chat_request"  # a translated call's chat form
    OVERRIDES: Final = "overrides"
    LOWERED: Final = "lowered"  # token counts above the gateway's cap, as asked (the call had the cap)
    POLICY_VERSION: Final = "policy_version"
    # The distribution the tokens were drawn from and their logprobs are under (`tether.sampling.Sampler`
    # as a dict); absent on spans recorded before it was, whose logprobs are the raw log-softmax.
    SAMPLING: Final = "sampling"
    PROMPT_TOKEN_IDS: Final = "prompt_token_ids"
    CHOICES: Final = "choices"  # [{index, text, finish_reason, token_ids, logprobs, tool_parse_error?}]
    USAGE: Final = "usage"
    RESPONSE: Final = "response"
    ERROR: Final = "error"


class AgentSource:
    HEADER: Final = "header"
    TRACE: Final = "trace"
    MODEL: Final = "model"


CHOICE_TOOL_PARSE_ERROR: Final = "tool_parse_error"
# OpenTelemetry attributes that name the agent a span belongs to, in order of preference.
AGENT_NAME_ATTRIBUTES: Final = ("tether.agent", "gen_ai.agent.name", "agent.name", "agent_name")

# -- gateway routes -----------------------------------------------------------------------------------

DEFAULT_ROUTE: Final = "*"  # the route-map entry for model names without a route of their own
POLICY_UPSTREAM: Final = "policy"  # the upstream name of the policy being trained or served

# -- rollout metadata keys ----------------------------------------------------------------------------


class Meta:
    SAMPLING_OVERRIDES: Final = "sampling_overrides"  # sampling parameters the run imposes on calls
    PROMPT_OVERRIDE: Final = "prompt_override"  # a system prompt put in place of the agent's
    SESSION: Final = "session"  # opened by hand (tether serve): no worker heartbeats it
    STEP: Final = "step"  # the training step that enqueued it
    # Whether rewards the agent reported itself count as its reward (set by the run: by default only
    # when the run has no evaluator).
    AGENT_REWARDS: Final = "agent_rewards"
    # Its calls are another model's text (a teacher, a hosted API), not tokens the policy generated: they
    # may become demonstrations for supervised training, never RL samples.
    DEMONSTRATION: Final = "demonstration"
    # A served session's share of a canary (`tether.deploy`): which policy serves it ("incumbent" or
    # "canary"), the canary's version while one runs, and the gateway upstream its calls go to.
    ARM: Final = "arm"
    CANARY: Final = "canary"
    UPSTREAM: Final = "upstream"


# -- tasks --------------------------------------------------------------------------------------------

# A task's fields for its evaluator only (reference answer, gold SQL, passages): one top-level JSON object
# under this key. The evaluator gets the whole task; the agent only `agent_task(task)`, in its environment,
# its argv, its Job and through its rollout token (docs/security.md, "Task fields only the evaluator sees").
TASK_REFERENCE: Final = "reference"


def agent_task(task: Mapping[str, Any]) -> dict[str, Any]:
    """What of a task its agent may see: every field but the reference."""
    return {key: value for key, value in task.items() if key != TASK_REFERENCE}


def has_reference(task: Mapping[str, Any]) -> bool:
    return TASK_REFERENCE in task


# The store resource kind of run records (`tether.runner.runs`): the operator's, never a rollout token's
# (each holds a digest of every whole task, from which a short reference could be guessed back).
RUN_RESOURCE_KIND: Final = "run"
# A deployment's canary state and decisions, one resource version per decision (`tether.deploy`).
CANARY_RESOURCE_KIND: Final = "canary"
OPERATOR_RESOURCE_KINDS: Final = (RUN_RESOURCE_KIND, CANARY_RESOURCE_KIND)


# -- training -----------------------------------------------------------------------------------------

ADVANTAGE_METHODS: Final = ("grpo", "drgrpo", "rloo")
DISTILLATION: Final = "opd"  # on-policy distillation from a teacher (`tether.algorithms.distill`)
ALGORITHMS: Final = (*ADVANTAGE_METHODS, "sft", DISTILLATION)
PROMPT_ALGORITHMS: Final = ("apo", "pareto")
LEARNER_SHARDINGS: Final = ("replicate", "fsdp")  # `--learner-sharding` (tether.learner.groups)
LOSS_AGGREGATIONS: Final = ("rollout", "token")
TIS_MODES: Final = ("truncate", "mask")
# What one importance weight pi_old / mu covers: each token; each sample's sequence (the product of its
# tokens' weights); or the sequence's geometric mean (the product to the power 1 / tokens).
TIS_LEVELS: Final = ("token", "sequence", "geometric")

# -- secrets from the environment (never Tether's command line: docs/security.md) --------------------

UPSTREAM_KEY_ENV: Final = "TETHER_UPSTREAM_KEY"  # the API key for --upstream (or --upstream-key-file)
OPTIMIZER_KEY_ENV: Final = "TETHER_OPTIMIZER_KEY"  # for --optimizer-endpoint (or --optimizer-key-file)
JUDGE_KEY_ENV: Final = "TETHER_JUDGE_KEY"  # for --judge-url (or --judge-key-file)
TEACHER_KEY_ENV: Final = "TETHER_TEACHER_KEY"  # for --teacher (or --teacher-key-file)
# PostgreSQL's client (libpq, under psycopg) reads a store's password from these.
POSTGRES_PASSWORD_ENV: Final = ("PGPASSWORD", "PGPASSFILE")
# Every variable that carries (or points at) a secret of the operator's; an agent never inherits one.
SECRET_ENV: Final = (
    UPSTREAM_KEY_ENV,
    OPTIMIZER_KEY_ENV,
    JUDGE_KEY_ENV,
    TEACHER_KEY_ENV,
    *POSTGRES_PASSWORD_ENV,
    "WANDB_API_KEY",
)
# Credentials and endpoints of model providers an agent's SDK reads by itself: with them it would call the
# provider directly, past the gateway, unrecorded. An agent never inherits one; the ones whose SDK can be
# pointed at the gateway are set to it instead (`tether.runner.pool.AgentEndpoints.env`).
PROVIDER_ENV: Final = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "ANTHROPIC_BASE_URL",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_ENDPOINT",
    "OPENAI_ORG_ID",
    "OPENAI_PROJECT_ID",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "MISTRAL_API_KEY",
    "GROQ_API_KEY",
    "TOGETHER_API_KEY",
    "FIREWORKS_API_KEY",
    "DEEPSEEK_API_KEY",
    "XAI_API_KEY",
    "OPENROUTER_API_KEY",
    "COHERE_API_KEY",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
)

# -- what one request may ask of the gateway, and how long a worker may go silent ---------------------
DEFAULT_MAX_TOKENS_CAP: Final = 4096  # tokens one call may ask for (max_tokens and its spellings)
DEFAULT_N_CAP: Final = 8  # choices one call may ask for (n, best_of)
DEFAULT_HEADER_TIMEOUT_S: Final = 30.0  # to send a request's headers
DEFAULT_BODY_TIMEOUT_S: Final = 60.0  # to send its body after them
DEFAULT_HEARTBEAT_TIMEOUT_S: Final = 60.0  # a worker's silence that times its attempt out (beats: 10 s)
