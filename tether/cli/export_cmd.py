"""`tether export`: a run's policy version as a folder vLLM and transformers load
(`tether.learner.export`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from tether.cli.options import add_settings
from tether.config.commands import ExportSettings, TrainSettings
from tether.config.files import ConfigFileError, read_config
from tether.project import Project

console = Console(stderr=True)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a run's policy as a PEFT adapter or a merged model folder",
        description=(
            "Write a trained policy version where other tools load it: by default its LoRA adapter with "
            "the base model and tokenizer named (vLLM --lora-modules, PeftModel.from_pretrained), with "
            "--merged the base model with the adapter merged into its weights (vllm serve DIR, "
            "AutoModelForCausalLM.from_pretrained). A fully fine-tuned policy is already a whole model "
            "and is copied as it is."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_settings(parser, ExportSettings())
    parser.set_defaults(command_main=run)


def run(args: argparse.Namespace) -> int:
    from tether.learner.export import ExportError, export_policy
    from tether.models.catalog import resolve_model

    run_dir = Project.at(args.project_dir).state_dir / "runs" / args.run
    if not run_dir.is_dir():
        known = sorted(p.name for p in run_dir.parent.glob("*") if p.is_dir()) or ["none"]
        raise SystemExit(f"tether export: no run {args.run!r} in {run_dir.parent} (runs: {', '.join(known)})")
    source = _policy_folder(run_dir, args.version, args.policy)
    model = args.model or _run_model(run_dir)
    try:
        with console.status(f"exporting {source} ..."):
            out = export_policy(source, Path(args.out), resolve_model(model), args.merged)
    except ExportError as exc:
        raise SystemExit(f"tether export: {exc}") from None
    what = "a merged model" if args.merged else "an adapter"
    console.print(f"[green]exported[/] {source.relative_to(run_dir.parent)} over {model} as {what}: {out}")
    return 0


def _policy_folder(run_dir: Path, version: int | None, policy: str | None) -> Path:
    """The saved policy to export: version N of `policies/`, else the newest kept, else the checkpoint's."""
    policies = run_dir / "policies" / (policy or "")
    if version is not None:
        folder = policies / f"v{version}"
        if not folder.is_dir():
            names = ", ".join(p.name for p in _versions(policies)) or "none"
            raise SystemExit(f"tether export: {run_dir.name} keeps no {folder.name} (kept: {names})")
        return folder
    kept = _versions(policies)
    if kept:
        return kept[-1]
    checkpoint = run_dir / "checkpoint" / (policy or "") / "policy"
    if checkpoint.is_dir():
        return checkpoint
    folders = policies.iterdir() if policies.is_dir() else iter(())
    several = sorted(p.name for p in folders if p.is_dir() and not p.name.startswith("v"))
    hint = (
        f": name one of {', '.join(several)} with --policy"
        if several and policy is None
        else " (one is saved at its first update; a step whose groups all scored alike makes none)"
    )
    raise SystemExit(f"tether export: run {run_dir.name} has saved no policy yet{hint}")


def _versions(folder: Path) -> list[Path]:
    found = [p for p in folder.glob("v*") if p.is_dir() and p.name[1:].isdigit()]
    return sorted(found, key=lambda p: int(p.name[1:]))


def _run_model(run_dir: Path) -> str:
    """The base model the run trained, from its config.toml."""
    try:
        settings = read_config(run_dir / "config.toml", TrainSettings)
    except ConfigFileError as exc:
        raise SystemExit(f"tether export: {exc}; give --model") from None
    return str(settings.get("server.model", TrainSettings().server.model))
