"""What a training run opens before its loop: the policy server (placed, given or opened by kind), one
learner per trained policy, and the gateway upstreams and routes of the trained and the fixed agents."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tether.contracts import DEFAULT_ROUTE, POLICY_UPSTREAM
from tether.gateway import HTTPUpstream, HTTPUpstreamConfig
from tether.gateway.upstreams import Upstream
from tether.learner.base import Learner, open_learner
from tether.placement.base import Placement
from tether.policy_server import PolicyServer, PolicyServerOptions, ServesSeveralPolicies, open_policy_server
from tether.trainer.config import TrainerConfig


def open_server(
    config: TrainerConfig, name: str, opened: list[PolicyServer], kind: str | None = None
) -> PolicyServer:
    """A policy server of `config`'s kind (or `kind`), named `name`, added to `opened` (closed at the end)."""
    options = config.server_options or PolicyServerOptions(model=config.model)
    options = replace(
        options,
        model=config.model,
        name=name,
        builtin=replace(options.builtin, max_batch_size=config.n_workers, threads=config.engine_threads),
        policies=max(1, len(config.policies)),
    )
    server = open_policy_server(kind or config.policy_server, options)
    opened.append(server)
    return server


def placed_server(
    config: TrainerConfig, placement: Placement, opened: list[PolicyServer]
) -> PolicyServer | None:
    """The placement's policy server (replicas), closed with the run; None: the trainer opens one."""
    options = config.server_options or PolicyServerOptions(model=config.model)
    options = replace(options, model=config.model)
    server = placement.policy_server(config.policy_server, options)
    if server is not None:
        opened.append(server)
    return server


def open_learners(
    config: TrainerConfig,
    placement: Placement,
    learner: Learner | None = None,
    learners: dict[str, Learner] | None = None,
) -> dict[str, Learner]:
    """One learner per trained policy, each with its own adapter and optimizer."""
    if not config.policies:
        placed = learner or placement.learner(config.policy)
        return {POLICY_UPSTREAM: placed or open_learner(config.learner, config.policy)}
    if learners is not None:
        if set(learners) != set(config.policy_names):
            raise ValueError(f"learners given for {sorted(learners)}, policies {config.policy_names}")
        return learners
    if learner is not None:
        raise ValueError("a learner given to Trainer trains one policy: give learners= for several")
    return {
        spec.name: open_learner(config.learner, spec.train_config(config.policy)) for spec in config.policies
    }


def policy_upstreams(config: TrainerConfig, server: PolicyServer) -> tuple[list[Upstream], dict[str, str]]:
    """The trained policies' upstreams and routes. With several, each alias routes to its own
    adapter and no other alias is served (the default route is dropped: `unrouted` names them)."""
    if not config.policies:
        return [server.upstream()], {}
    if not isinstance(server, ServesSeveralPolicies):
        raise ValueError(f"{type(server).__name__} serves one policy: several need the built-in engine")
    names = config.policy_names
    return [server.policy_upstream(name) for name in names], {name: name for name in names}


def fixed_upstreams(
    config: TrainerConfig, opened: list[PolicyServer]
) -> tuple[list[Upstream], dict[str, str]]:
    """An upstream per fixed agent's model alias, and the routes to them. The base model (a second,
    frozen copy, never given new weights) is loaded only when some fixed agent uses it."""
    upstreams: list[Upstream] = []
    routes = {} if config.policies else {DEFAULT_ROUTE: POLICY_UPSTREAM}
    base: PolicyServer | None = None
    for alias, url in config.fixed_agents.items():
        if url is None:
            if base is None:
                # The frozen base model runs in the built-in engine, whatever serves the policy.
                base = open_server(config, "base", opened, kind="builtin")
                upstreams.append(base.upstream())
            routes[alias] = "base"
        else:
            name = f"fixed:{alias}"
            upstreams.append(HTTPUpstream(HTTPUpstreamConfig(name=name, base_url=url)))
            routes[alias] = name
    return upstreams, routes


def refuse_unrouted(unrouted: Counter[str], config: TrainerConfig) -> None:
    """With several policies, an agent label (model alias) that maps to none and is not fixed stops the
    run after the first rollouts that asked for it, naming the labels seen and the known ones."""
    if not unrouted:
        return
    seen = ", ".join(f"{name!r} ({count} calls)" for name, count in sorted(unrouted.items()))
    fixed = ", ".join(config.fixed_agents) or "none"
    raise SystemExit(
        f"tether train: the agent asked for models that map to no policy and are not fixed: {seen}. "
        f"Policies: {', '.join(config.policy_names)}; fixed agents: {fixed}. Give each a "
        "--policy NAME=lora:rR or a --fixed-agent NAME."
    )
