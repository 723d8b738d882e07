"""The documented defaults of ten agent frameworks, each run unmodified as a `tether rollout` agent
(sandboxed, the default): configured as its quick start shows, from the environment Tether gives every
agent. None of the calls they make is refused: each rollout records at least one model call, every call
is served (token ids recorded), and no `gateway.refused` span is kept.

The frameworks live in environments of their own (`.venv-frameworks/`, made by
`scripts/ensure_frameworks.sh`, which `make test` runs): they are agents, not Tether's dependencies, and
LlamaIndex and CrewAI pin `openai` below the version the others need. The agents are in
`frameworks/agents/`, one module per framework; the tiny random model answers nonsense, so a framework may
give up after its own retries, and that takes it down its fallback paths (DSPy's JSON mode) too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.cli.main import main
from tether.contracts import REFUSED_CALL_SPAN, CallAttr, is_call_span
from tether.store import SQLiteStore

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).parent / "frameworks" / "agents" / "survey_agent.py"
ENVIRONMENTS = ROOT / ".venv-frameworks"
# Each framework's defaults, by the environment that holds it: `module:function` in frameworks/agents/.
ON_THE_TINY_MODEL = {
    "main": [
        "pydantic_ai_agents:openai_agent",
        "pydantic_ai_agents:openai_responses_agent",
        "pydantic_ai_agents:anthropic_agent",  # max_tokens 64,000: the gateway lowers it to its cap
        "litellm_agents:completion",
        "litellm_agents:streamed",
        "haystack_agents:generator",
        "haystack_agents:agent",
        "semantic_kernel_agents:agent",
        "langgraph_agents:react_agent",
        "langgraph_agents:anthropic_react_agent",
        "agents_sdk_agents:agent",  # the Responses API, with `text.verbosity` for its default model
    ],
    "openai2": [
        "llama_index_agents:openai_agent",
        "llama_index_agents:openai_like_agent",
        "crewai_agents:crew",
    ],
}
# Defaults that need more than the tiny model: DSPy's JSON fallback asks for constrained decoding (the
# built-in engine refuses it by design, vLLM honours it), smolagents' CodeAgent's system prompt is
# longer than the tiny model's 2,048-token context, and its ToolCallingAgent's second call holds a first
# answer that ran to the built-in engine's 512 tokens (the tiny model seldom stops) over 1,235 of prompt.
ON_VLLM = [
    "dspy_agents:predict",
    "dspy_agents:react",
    "smolagents_agents:code_agent",
    "smolagents_agents:tool_calling_agent",
]

if not all((ENVIRONMENTS / name / "bin" / "python").exists() for name in ON_THE_TINY_MODEL):
    pytest.skip(
        "the frameworks' environments are not made: bash scripts/ensure_frameworks.sh",
        allow_module_level=True,
    )


def survey(project: Path, environment: str, defaults: list[str], *serving: str) -> dict[str, list[str]]:
    """Run each default as one rollout; what went wrong with each one's calls (nothing, when all is well)."""
    project.mkdir()
    tasks = project / "tasks.jsonl"
    lines = [
        {"id": name.replace(":", "-"), "framework": name, "q": "What is the weather in Paris?"}
        for name in defaults
    ]
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines))
    agent = f"{ENVIRONMENTS / environment / 'bin' / 'python'} {AGENT} {{framework}}"
    main(["rollout", "--agent", agent, "--tasks", str(tasks), *serving, "--project-dir", str(project)])
    store = SQLiteStore(project / ".tether" / "store.db")
    found: dict[str, list[str]] = {}
    for rollout in store.list_rollouts(limit=100):
        spans = store.query_spans(rollout_id=rollout.id)
        calls = [s for s in spans if is_call_span(s.name)]
        problems = [f"refused: {s.status_message}" for s in spans if s.name == REFUSED_CALL_SPAN]
        problems += [f"failed: {s.status_message}" for s in calls if s.status != "ok"]
        problems += [] if calls else [f"no model call (agent: {rollout.output or rollout.error})"]
        problems += [
            f"no token ids: {s.span_id}" for s in calls if not s.attributes[CallAttr.PROMPT_TOKEN_IDS]
        ]
        found[rollout.input["framework"]] = problems
    assert sorted(found) == sorted(defaults)
    return found


@pytest.mark.parametrize("environment", sorted(ON_THE_TINY_MODEL))
def test_no_call_of_a_frameworks_documented_default_is_refused(tmp_path: Path, environment: str) -> None:
    found = survey(
        tmp_path / "project", environment, ON_THE_TINY_MODEL[environment], "--model", "tiny-random"
    )
    assert {name: problems for name, problems in found.items() if problems} == {}


@pytest.mark.vllm
@pytest.mark.smollm2
@pytest.mark.second_vllm
def test_dspys_json_fallback_and_smolagents_code_agent_are_served_by_vllm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A KV cache of 1 GiB (Tether's default on CPU is 2) holds four of these 4,096-token contexts: this is
    # the suite's second vLLM, beside the session's.
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    # The context SmolLM2 was trained to; and at most 64 tokens for a call that names no bound (DSPy's and
    # smolagents' name none), so that the real model's rambling ends soon on a busy CPU (the suite's other
    # workers share it): the survey is of what the calls ask, not of the answers.
    vllm_args = """--max-model-len 4096 --override-generation-config '{"max_new_tokens": 64}'"""
    serving = ["--policy-server", "vllm", "--model", "smollm2-135m", "--vllm-args", vllm_args]
    found = survey(tmp_path / "project", "main", ON_VLLM, *serving, "--timeout", "600")
    assert {name: problems for name, problems in found.items() if problems} == {}
    store = SQLiteStore(tmp_path / "project" / ".tether" / "store.db")
    asked = {
        rollout.input["framework"]: [
            (span.attributes[CallAttr.REQUEST].get("response_format") or {}).get("type")
            for span in store.query_spans(rollout_id=rollout.id)
            if is_call_span(span.name)
        ]
        for rollout in store.list_rollouts(limit=10)
    }
    # DSPy fell back to its JSON adapter (the tiny budget cuts its first answer), and vLLM served that call
    assert "json_schema" in asked["dspy_agents:predict"] and "json_object" in asked["dspy_agents:react"]
