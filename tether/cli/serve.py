"""`tether serve`: store + gateway + engine in one process."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import sys
from pathlib import Path

import uvicorn
from rich.console import Console

from tether.cli.options import add_settings, settings_from_args
from tether.cli.secrets import JUDGE_KEY, UPSTREAM_KEY, add_secret_arg, secret_value
from tether.compose import create_app
from tether.config.commands import ServeSettings
from tether.contracts import DEFAULT_ROUTE, POLICY_UPSTREAM
from tether.dashboard import DashboardConfig
from tether.experiment.assembly import open_settings_store
from tether.experiment.deployment import canary_of, session_judge_of
from tether.experiment.inputs import agent_quota, request_caps
from tether.experiment.serving import served_policy
from tether.gateway import Gateway, GatewayConfig
from tether.gateway.server import (
    ClientTimeouts,
    listen,
    server_config,
    url_of,
)
from tether.gateway.sessions import SessionBook, SessionRules
from tether.project import Project
from tether.store.backends import scheme_of
from tether.store.recovery import StaleSweeper

console = Console(stderr=True)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the store, the gateway and the model engine in one process",
        description=(
            "Serve an OpenAI-compatible gateway that records every model call, with its token ids and "
            "logprobs, into the project's store (.tether/store.db). By default the built-in engine serves "
            "the policy model; --upstream forwards to any OpenAI-compatible server instead. An ad-hoc "
            "session rollout is opened and two `export` lines are printed: paste them into a shell and any "
            "agent that reads OPENAI_BASE_URL / OPENAI_API_KEY is recorded."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_settings(parser, ServeSettings())
    add_secret_arg(parser, UPSTREAM_KEY)
    add_secret_arg(parser, JUDGE_KEY)
    parser.set_defaults(command_main=run)


def parse_routes(items: list[str]) -> dict[str, str]:
    routes = {DEFAULT_ROUTE: POLICY_UPSTREAM}
    for item in items:
        alias, sep, upstream = item.partition("=")
        if not sep or not alias or not upstream:
            raise SystemExit(f"tether serve: --route expects ALIAS=UPSTREAM, got {item!r}")
        routes[alias] = upstream
    return routes


def _is_loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def run(args: argparse.Namespace) -> int:
    settings: ServeSettings = settings_from_args(args)
    project = Project.at(args.project_dir)
    routes = parse_routes(args.route)
    if args.heartbeat_timeout <= 0:
        raise SystemExit("tether serve: --heartbeat-timeout must be positive")
    if args.session_idle < 0 or args.max_session_rewards < 1:
        raise SystemExit("tether serve: --session-idle must be >= 0 and --max-session-rewards >= 1")
    request_caps(args.max_tokens_cap, args.n_cap, "serve")
    if args.header_timeout < 0 or args.body_timeout < 0:
        raise SystemExit("tether serve: --header-timeout and --body-timeout cannot be negative")
    if not _is_loopback(args.host):
        # There is no way to turn auth off, so the warning is about exposure, not an open server.
        console.print(
            f"[yellow]warning:[/] binding {args.host}: the gateway is reachable from other machines; "
            "keep the admin token secret"
        )
    if args.store and scheme_of(args.store) in ("http", "https"):
        raise SystemExit("tether serve: --store must name a database (serve is what http(s) stores point at)")
    store = open_settings_store(settings.store, "serve")
    sweeper = StaleSweeper(store, args.heartbeat_timeout)
    authority = project.authority()
    token_path = project.write_admin_token(authority)
    config = GatewayConfig.for_agents(
        agent_quota(settings.quota), routes=routes, max_tokens_cap=args.max_tokens_cap, n_cap=args.n_cap
    )
    gateway = Gateway(store, authority, config)
    policy = contextlib.ExitStack()  # vLLM, when it serves the policy, stops with the server
    serving = served_policy(
        settings.server,
        settings.upstream,
        secret_value(args, UPSTREAM_KEY),
        console,
        project.state_dir / "logs",
        adapter=settings.gateway.adapter,
    )
    server = policy.enter_context(serving)
    upstream = server.upstream()
    gateway.add_upstream(upstream)
    try:
        canary = canary_of(settings, store, gateway, server)
        judge = session_judge_of(settings, store, secret_value(args, JUDGE_KEY))
    except BaseException:
        policy.close()
        raise
    sessions = SessionBook(
        gateway,
        SessionRules(args.session_idle, args.max_session_rewards, args.sessions_run),
        assign=canary.assign if canary is not None else None,
    )
    app = create_app(gateway, _dashboard(project, upstream), sessions)
    try:
        sock = listen(args.host, args.port)
    except OSError as exc:
        policy.close()
        raise SystemExit(f"tether serve: {exc}") from None
    gateway.config.public_url = url_of(sock, args.host)
    # The socket already listens: an agent started as soon as "ready" is printed just queues briefly.
    _announce(gateway, project, token_path, open_session=not args.no_session)
    timeouts = ClientTimeouts(args.header_timeout, args.body_timeout)
    web = uvicorn.Server(server_config(app, timeouts=timeouts, log_level=args.log_level))
    sweeper.start()
    sessions.start()
    if canary is not None:
        canary.start(settings.canary.canary_interval)
    if judge is not None:
        judge.start(settings.judge.judge_interval)
    try:
        web.run(sockets=[sock])
    finally:
        for background in (canary, judge):
            if background is not None:
                background.stop()
        sessions.stop()
        sweeper.stop()
        sock.close()
        policy.close()
        store.close()
    return 0


def _dashboard(project: Project, upstream: object) -> DashboardConfig:
    """Token ids are decoded with the built-in engine's own tokenizer; behind another upstream they are
    shown as ids (which tokenizer it uses is not known here)."""
    tokenizer = getattr(getattr(upstream, "engine", None), "tokenizer", None)
    return DashboardConfig(runs_dir=project.state_dir / "runs", loaded_tokenizer=tokenizer)


def _announce(gateway: Gateway, project: Project, token_path: Path, open_session: bool) -> None:
    url = gateway.config.public_url
    out = sys.stdout
    out.write(f"Tether gateway on {url}  (OpenAI API under /rollouts/<id>/v1, store API under /store)\n")
    out.write(f"store: {project.store_path}\nadmin token: {token_path}\n")
    out.write(f"dashboard: {url}/ui  (read-only viewer token: {gateway.auth.viewer_token})\n")
    deploy_key, reward_key = project.write_session_keys(gateway.auth)
    out.write(f"named sessions: POST {url}/sessions/open with the deploy key in {deploy_key}\n")
    out.write(f"later rewards: POST {url}/sessions/NAME/rewards with the reward key in {reward_key}\n")
    if open_session:
        claim = gateway.store.start_session({"source": "tether serve"})
        creds = gateway.credentials(claim.rollout.id, claim.attempt.number)
        out.write(f"session rollout {claim.rollout.id}: run your agent in a shell with\n")
        out.write(f"export OPENAI_BASE_URL={creds['base_url']}\n")
        out.write(f"export OPENAI_API_KEY={creds['api_key']}\n")
    out.write("ready\n")
    out.flush()
