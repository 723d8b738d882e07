"""vLLM as the policy server: replicas Tether starts itself (managed) or that the user started (external).

Versions. Version 0 is the base model. A LoRA version N is loaded into every replica under its own name,
`policy-vN`, and the gateway's upstream is retargeted to that name: a call records the version of the
name it was sent with, so every recorded call names the version that generated it, and calls that
started on N-1 finish on N-1 (the two newest names stay loaded). Full weights are reloaded in place
through vLLM's `reload_weights`, around vLLM's own pause when the server has it.

Several policies (`policy_upstream`, `load_policy`). Each is a LoRA adapter of the same base model with its
own names (`policy-NAME-vN`), version and upstream over the same replicas; vLLM batches calls of several
adapters together (managed replicas start with `--max-loras` = policies x the two versions kept; an
external server is checked for as many).

Replicas. Rollouts stick to one replica (`ReplicaUpstream`). A watcher thread pings each replica; one that
stops answering leaves the rotation, a managed one is restarted, and any replica that comes back is
loaded with the current version before it gets traffic again.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx

from tether.gateway.upstreams import HTTPUpstream, HTTPUpstreamConfig, ReplicaUpstream, Upstream
from tether.policy_server.base import PolicyServerError, PolicyWeights
from tether.policy_server.vllm.launch import LaunchSpec, VLLMInstall, VLLMProcess, VLLMSetupError
from tether.policy_server.vllm.replica import Replica, VLLMError, check_capabilities

log = logging.getLogger(__name__)
WATCH_INTERVAL_S = 1.0
ADAPTERS_KEPT = 2
RESTARTS_MAX = 5


@dataclass(frozen=True)
class Served:
    """What the replicas serve now: the version, the model name calls are sent as, its weights."""

    version: int
    model: str
    weights: PolicyWeights | None = None


class VLLMPolicyServer:
    def __init__(
        self,
        replicas: Sequence[Replica],
        *,
        name: str = "policy",
        base_model: str,
        use_pause: bool,
        on_wait: Callable[[float, str], None] | None = None,
        processed_logprobs: bool = True,
    ) -> None:
        self.processed_logprobs = processed_logprobs
        self.name = name
        self.replicas = list(replicas)
        self.use_pause = use_pause
        self.on_wait = on_wait
        self.base_model = base_model
        self.served = Served(0, base_model)
        # Adapter names are unique to this server object: a shared external vLLM may still hold
        # `policy-v1` of an earlier run, and a name must never stand for two sets of weights.
        self.adapter_prefix = f"{name}-{secrets.token_hex(3)}"
        self.swap_seconds: list[float] = []
        self.restarts = 0
        self._upstream = self._replica_upstream(name)
        self.policies: dict[str, tuple[Served, ReplicaUpstream]] = {}  # several policies: name -> track
        self._lock = threading.Lock()  # one swap or one restore at a time
        self._pool = ThreadPoolExecutor(max_workers=max(1, len(self.replicas)), thread_name_prefix="vllm")
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="tether-vllm-watch", daemon=True)
        self._watcher.start()

    def _replica_upstream(self, name: str) -> ReplicaUpstream:
        http = [
            HTTPUpstream(
                HTTPUpstreamConfig(
                    name=f"{name}#{index}",
                    base_url=replica.base_url,
                    model=self.base_model,
                    request_token_ids=True,
                    policy_version=0,
                    max_retries=2,
                    processed_logprobs=self.processed_logprobs,
                )
            )
            for index, replica in enumerate(self.replicas)
        ]
        return ReplicaUpstream(name, http, on_down=self._on_down)

    def _upstreams(self) -> list[ReplicaUpstream]:
        return [self._upstream, *(upstream for _, upstream in self.policies.values())]

    # -- the PolicyServer protocol ----------------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self.served.version

    def upstream(self) -> Upstream:
        return self._upstream

    async def load(self, weights: PolicyWeights) -> int:
        return await asyncio.to_thread(self._load, weights)

    # -- several policies ---------------------------------------------------------------------------------

    def policy_upstream(self, policy: str) -> Upstream:
        if policy not in self.policies:
            self.policies[policy] = (Served(0, self.base_model), self._replica_upstream(policy))
        return self.policies[policy][1]

    def version_of(self, policy: str) -> int:
        return self.policies[policy][0].version if policy in self.policies else 0

    async def load_policy(self, weights: PolicyWeights, policy: str) -> int:
        if weights.kind != "lora":
            raise PolicyServerError(
                f"policy {policy}: several policies share the base model as LoRA adapters only"
            )
        self.policy_upstream(policy)
        return await asyncio.to_thread(self._load, weights, policy)

    async def pause(self) -> None:
        if self.use_pause:
            await asyncio.to_thread(self._each_live, Replica.pause)

    async def resume(self) -> None:
        if self.use_pause:
            await asyncio.to_thread(self._each_live, Replica.resume)

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._watcher.join(timeout=5)
        for replica in self.replicas:
            if replica.process is not None:
                replica.process.stop()
            else:
                self._unload_all(replica)  # a server the user runs keeps nothing of ours
        self._pool.shutdown(wait=False)

    # -- swaps --------------------------------------------------------------------------------------------

    def _load(self, weights: PolicyWeights, policy: str | None = None) -> int:
        started = time.monotonic()
        prefix = self.adapter_prefix if policy is None else f"{self.adapter_prefix}-{policy}"
        with self._lock:
            model = f"{prefix}-v{weights.version}" if weights.kind == "lora" else self.base_model
            self._each_live(lambda replica: self._apply(replica, weights, model))
            served = Served(weights.version, model, weights)
            if policy is None:
                self.served, upstream = served, self._upstream
            else:
                upstream = self.policies[policy][1]
                self.policies[policy] = (served, upstream)
            upstream.retarget(model, weights.version)
            if weights.kind == "lora":
                self._each_live(self._unload_old)
        self.swap_seconds.append(time.monotonic() - started)
        return weights.version

    def _apply(self, replica: Replica, weights: PolicyWeights, model: str) -> None:
        if weights.kind == "lora":
            replica.load_adapter(model, weights.path)
        else:
            replica.reload_weights(weights.path, weights.version)

    def _unload_old(self, replica: Replica) -> None:
        """Keep each policy's two newest adapters (the one served, and the one calls may still finish on)."""
        prefix = re.escape(self.adapter_prefix)
        tracks = [re.compile(rf"{prefix}-{re.escape(name)}-v\d+") for name in self.policies]
        for track in [re.compile(rf"{prefix}-v\d+"), *tracks]:
            names = [name for name in replica.adapters if track.fullmatch(name)]
            for old in names[:-ADAPTERS_KEPT]:
                replica.unload_adapter(old)

    def _unload_all(self, replica: Replica) -> None:
        for name in list(replica.adapters):
            try:
                replica.unload_adapter(name)
            except (VLLMError, httpx.HTTPError) as exc:
                log.warning("could not unload %s from %s: %s", name, replica.url, exc)

    def _each_live(self, action: Callable[[Replica], object]) -> None:
        """Run `action` on every replica in rotation, at once; the first failure is raised."""
        live = [self.replicas[i] for i in self._upstream.live()]
        for future in [self._pool.submit(action, replica) for replica in live]:
            future.result()

    # -- watching replicas -------------------------------------------------------------------------------

    def _on_down(self, index: int, reason: str) -> None:
        self._wake.set()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(WATCH_INTERVAL_S)
            self._wake.clear()
            for index, replica in enumerate(self.replicas):
                if self._stop.is_set():
                    return
                try:
                    self._check(index, replica)
                except (VLLMError, VLLMSetupError, OSError) as exc:
                    log.warning("replica %s: %s", replica.url, exc)

    def _check(self, index: int, replica: Replica) -> None:
        up = all(upstream.is_up(index) for upstream in self._upstreams())
        process = replica.process
        if process is not None and not process.alive():
            if up:
                self._mark_down(index, f"vLLM at {replica.url} exited: {process.failure()}")
            self._restart(replica)
        elif up:
            if not replica.healthy():
                self._mark_down(index, f"vLLM at {replica.url} stopped answering /health")
            return
        if replica.healthy():
            self._restore(index, replica)

    def _mark_down(self, index: int, reason: str) -> None:
        for upstream in self._upstreams():
            upstream.mark_down(index, reason)

    def _restart(self, replica: Replica) -> None:
        if self.restarts >= RESTARTS_MAX:
            return
        self.restarts += 1
        assert replica.process is not None
        log.warning("restarting vLLM at %s (restart %d)", replica.url, self.restarts)
        replica.process.start()
        replica.process.wait_ready(on_wait=self.on_wait)

    def _restore(self, index: int, replica: Replica) -> None:
        """A replica back in rotation serves what the others serve: each policy's current version first."""
        with self._lock:
            served = self.served
            replica.adapters.clear()  # a restarted server has none; a live one keeps what it had
            for track in [served, *(track for track, _ in self.policies.values())]:
                if track.weights is not None and track.weights.kind == "lora":
                    _reload_adapter(replica, track)
            if served.weights is not None and served.weights.kind != "lora":
                replica.reload_weights(served.weights.path, served.version)
            for upstream in self._upstreams():
                upstream.mark_up(index)
        log.warning("replica %s back in rotation, serving version %d", replica.url, served.version)


def _reload_adapter(replica: Replica, served: Served) -> None:
    assert served.weights is not None
    try:
        replica.load_adapter(served.model, served.weights.path)
    except VLLMError as exc:
        if "already" not in str(exc):
            raise
        replica.adapters.append(served.model)


# -- opening one --------------------------------------------------------------------------------------------


def start_managed(
    install: VLLMInstall,
    specs: Sequence[LaunchSpec],
    *,
    name: str,
    on_wait: Callable[[float, str], None] | None = None,
) -> VLLMPolicyServer:
    """Start one server per spec (at once), wait for all, and serve through them."""
    processes = [VLLMProcess(install, spec) for spec in specs]
    try:
        for process in processes:
            process.start()
        for process in processes:
            process.wait_ready(on_wait=on_wait)
    except BaseException:
        for process in processes:
            process.stop()
        raise
    replicas = [Replica(p.url, p) for p in processes]
    return VLLMPolicyServer(
        replicas, name=name, base_model=specs[0].served_name, use_pause=True, on_wait=on_wait
    )


def connect_external(
    urls: Sequence[str], *, name: str, need_pause: bool = False, policies: int = 1
) -> VLLMPolicyServer:
    """Use servers the user started, after checking each has what Tether needs."""
    replicas = [Replica(url.rstrip("/").removesuffix("/v1")) for url in urls]
    capabilities = [check_capabilities(replica) for replica in replicas]
    problems = [f"{r.url}: {p}" for r, c in zip(replicas, capabilities, strict=True) for p in c.problems]
    wanted = ADAPTERS_KEPT * max(1, policies)
    problems += [
        f"{r.url}: started with --max-loras {c.max_loras}; {policies} policies keep {wanted} adapters "
        f"loaded (each serves its version and the one before): restart it with --max-loras {wanted}"
        for r, c in zip(replicas, capabilities, strict=True)
        if policies > 1 and c.max_loras is not None and c.max_loras < wanted
    ]
    if need_pause:
        problems += [
            f"{r.url}: no /pause route: start vLLM with VLLM_SERVER_DEV_MODE=1 in its environment"
            for r, c in zip(replicas, capabilities, strict=True)
            if not c.pause
        ]
    if problems:
        raise VLLMSetupError("the vLLM servers cannot serve a trained policy:\n  " + "\n  ".join(problems))
    for replica, found in zip(replicas, capabilities, strict=True):
        if not found.processed_logprobs:
            log.warning(
                "%s returns raw logprobs: calls sampled at a temperature other than 1 (or with top-p, "
                "top-k) cannot be trained on; start vLLM with --logprobs-mode processed_logprobs "
                "--generation-config vllm",
                replica.url,
            )
    models = {c.base_model for c in capabilities}
    if len(models) > 1:
        raise VLLMSetupError(f"the vLLM servers serve different base models: {', '.join(sorted(models))}")
    return VLLMPolicyServer(
        replicas,
        name=name,
        base_model=capabilities[0].base_model,
        use_pause=all(c.pause for c in capabilities),
        processed_logprobs=all(c.processed_logprobs for c in capabilities),
    )


def model_has_tool_template(model_dir: Path) -> bool:
    """Whether the model's own chat template renders tools (then vLLM uses it, not ours)."""
    import json

    from tether.models.tools import template_supports_tools

    config = model_dir / "tokenizer_config.json"
    template_file = model_dir / "chat_template.jinja"
    if template_file.exists():
        return template_supports_tools(template_file.read_text())
    if config.exists():
        return template_supports_tools(json.loads(config.read_text()).get("chat_template"))
    return False
