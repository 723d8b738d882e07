"""Options and wiring shared by the commands that serve the policy (serve, rollout, train)."""

from __future__ import annotations

import argparse
import time

from rich.console import Console

from tether.gateway import EngineUpstream, HTTPUpstream, HTTPUpstreamConfig


def add_policy_args(parser: argparse.ArgumentParser, default_model: str = "smollm2-135m") -> None:
    parser.add_argument(
        "--model",
        default=default_model,
        help="policy model for the built-in engine: smollm2-135m, tiny-random, or a local HF folder",
    )
    parser.add_argument(
        "--upstream",
        metavar="URL",
        help="forward calls to this OpenAI-compatible base URL instead of the built-in engine",
    )
    parser.add_argument("--upstream-key", metavar="KEY", help="API key for --upstream")
    parser.add_argument("--upstream-model", metavar="NAME", help="model name to send to --upstream")
    parser.add_argument(
        "--upstream-token-ids",
        action="store_true",
        help="ask --upstream for token ids (vLLM's return_token_ids)",
    )
    parser.add_argument("--max-batch-size", type=int, default=8, help="built-in engine: requests per batch")


def load_engine(model: str, max_batch_size: int, console: Console):  # noqa: ANN201  (lazy torch import)
    try:
        from tether.engines import TransformersEngine
    except ImportError as exc:
        raise SystemExit(
            f"the built-in engine needs torch and transformers ({exc}). "
            "Install them with: pip install torch==2.13.0 && pip install -e '.[engine]'"
        ) from exc
    started = time.monotonic()
    with console.status(f"loading model {model} ..."):
        try:
            engine = TransformersEngine(model, max_batch_size=max_batch_size)
        except (ValueError, FileNotFoundError, RuntimeError) as exc:
            raise SystemExit(f"cannot load model {model!r}: {exc}") from exc
    console.print(f"[green]model[/] {model} loaded in {time.monotonic() - started:.1f}s")
    return engine


def policy_upstream(args: argparse.Namespace, console: Console) -> EngineUpstream | HTTPUpstream:
    if args.upstream:
        return HTTPUpstream(
            HTTPUpstreamConfig(
                name="policy",
                base_url=args.upstream,
                api_key=args.upstream_key,
                model=args.upstream_model,
                request_token_ids=args.upstream_token_ids,
            )
        )
    return EngineUpstream(load_engine(args.model, args.max_batch_size, console), name="policy")
