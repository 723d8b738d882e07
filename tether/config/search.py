"""The prompt search's settings, and what `tether transitions export` writes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tether.config.option import option
from tether.contracts import PROMPT_ALGORITHMS


def rollout_statuses() -> list[str]:
    from tether.store import RolloutStatus

    return [status.value for status in RolloutStatus]


@dataclass
class SearchSettings:
    """The prompt search: the optimizer model and the search's shape."""

    optimizer_endpoint: str | None = option(
        None,
        "OpenAI-compatible base URL of the optimizer model, or 'policy' for the policy itself",
        metavar="URL",
        required=True,
        run="shape",
    )
    optimizer_model: str | None = option(
        None,
        "model name for the optimizer endpoint",
        metavar="NAME",
        run="shape",
    )
    optimizer_temperature: float = option(
        0.7,
        "the optimizer model's sampling temperature",
    )
    optimizer_max_tokens: int = option(
        1024,
        "longest optimizer answer",
    )
    algorithm: str = option(
        "apo",
        "apo: a beam of critiqued rewrites, round by round; pareto: keep the prompts that are best on some "
        "task, and merge them",
        choices=PROMPT_ALGORITHMS,
        run="shape",
    )
    budget: int = option(
        64,
        "agent rollouts in all, never exceeded",
        run="shape",
    )
    beam_width: int = option(
        2,
        "apo: prompts kept each round",
        run="shape",
    )
    branch_factor: int = option(
        2,
        "apo: rewrites per beam prompt",
        run="shape",
    )
    rounds: int = option(
        3,
        "apo: rounds",
        run="shape",
    )
    batch_size: int = option(
        4,
        "training rollouts the optimizer reads per critique",
        run="shape",
    )
    val_batch_size: int = option(
        4,
        "validation tasks per candidate",
        run="shape",
    )
    merge_probability: float = option(
        0.25,
        "pareto: chance of a merge",
        run="shape",
    )
    max_iterations: int = option(
        100,
        "pareto: iterations at most",
        run="shape",
    )
    initial_prompt: str | None = option(
        None,
        "starting prompt (default: the agent's own, read from a run)",
        metavar="FILE",
    )
    prompt_name: str = option(
        "system",
        "name of the prompt resource in the store",
        run="shape",
    )
    override: str = option(
        "replace",
        "how the gateway puts the candidate in: the whole system message, only its "
        "<<prompt>>...<</prompt>> span, or not at all (the agent calls tether.get_prompt)",
        choices=["replace", "marked", "none"],
        run="shape",
    )
    out: str | None = option(
        None,
        "where to write the best prompt",
        metavar="FILE",
        required=True,
    )
    seed: int = option(
        0,
        "seeds the search's sampling of tasks and candidates",
        run="shape",
    )


@dataclass
class ExportFileSettings:
    """What `tether transitions export` writes, and which rollouts it reads."""

    out: Path | None = option(
        None,
        "output: a .jsonl file, or a folder for --format hf",
        metavar="PATH",
        required=True,
    )
    format: str = option(
        "jsonl",
        "jsonl (default): one JSON transition per line; hf: a `datasets` dataset (save_to_disk)",
        choices=["jsonl", "hf"],
    )
    merge: bool = option(
        False,
        "merge consecutive calls of one agent whose prompt extends the previous sequence exactly "
        "(observation tokens get loss mask 0)",
    )
    agents: list[str] | None = option(
        None,
        "only train these agents (the X-Tether-Agent header, or the model alias); others are "
        "skipped (default: all agents)",
        flags=("--agent",),
        action="extend",
        metavar="NAME",
    )
    statuses: list[str] | None = option(
        None,
        "only rollouts with these statuses (default: the finished ones: cancelled, failed, "
        "succeeded, timed_out)",
        flags=("--status",),
        action="extend",
        metavar="STATUS",
        choices=rollout_statuses,
    )
    mode: str | None = option(
        None,
        "only rollouts of this mode, e.g. train (default: any)",
    )
    run: str | None = option(
        None,
        "only this run's rollouts (default: any)",
        metavar="NAME",
    )
    reward_name: str | None = option(
        None,
        "use the last primary reward with this name as the final reward (default: any name)",
        metavar="NAME",
    )
    attempts: str = option(
        "last",
        "which attempts of a retried rollout to export (default: last)",
        choices=["last", "all"],
    )
    choice: int = option(
        0,
        "which choice of an n>1 call to export (default: 0)",
        metavar="N",
    )


@dataclass
class PolicyExportSettings:
    """Which policy version `tether export` writes, and how."""

    run: str | None = option(None, "the run whose policy is exported", metavar="NAME", required=True)
    out: str | None = option(None, "the folder to write (new, or empty)", metavar="DIR", required=True)
    version: int | None = option(
        None,
        "the policy version (the run folder's policies/vN; default: the newest kept, else the checkpoint's)",
        metavar="N",
    )
    policy: str | None = option(
        None, "with several trained policies (--policy NAME=...), the one to export", metavar="NAME"
    )
    merged: bool = option(
        False,
        "merge the LoRA adapter into the base model's weights (a whole model: `vllm serve DIR`, "
        "AutoModelForCausalLM); default: the adapter, its base model and tokenizer named (vLLM "
        "--lora-modules, PeftModel.from_pretrained)",
    )
    model: str | None = option(
        None,
        "the base model: smollm2-135m, tiny-random or a local HF folder (default: the run's, from its "
        "config.toml)",
    )
    project_dir: str | None = option(None, "project directory holding .tether/ (default: cwd)")
