"""The settings of the Kubernetes runner (`--runner k8s`); importing this loads no Kubernetes client."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_TTL_S = 600


class K8sOptionsError(ValueError):
    pass


@dataclass(frozen=True)
class Listen:
    host: str
    port: int


@dataclass(frozen=True)
class K8sOptions:
    job_template: Path
    agent_url: str
    namespace: str = "default"
    kubeconfig: str | None = None
    max_jobs_per_minute: float = 60.0
    # Where pods' connections are accepted and relayed to the gateway (which listens on loopback only).
    listen: Listen | None = None
    ttl_s: int = DEFAULT_TTL_S
    resync_s: float = 10.0
    preflight_timeout_s: float = 120.0
    # How long past its deadline an attempt waits for its Job to report an ending before giving up on it
    # (scheduling and pulling count toward activeDeadlineSeconds, so this is slack for the API, not the pod).
    end_grace_s: float = 60.0

    def __post_init__(self) -> None:
        if not self.job_template.is_file():
            raise K8sOptionsError(f"--job-template {self.job_template}: no such file")
        parts = urlsplit(self.agent_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise K8sOptionsError(
                f"--agent-url {self.agent_url!r}: expected http://HOST:PORT, how pods reach the gateway "
                "(e.g. http://host.minikube.internal:8123)"
            )
        if self.max_jobs_per_minute <= 0:
            raise K8sOptionsError("--max-jobs-per-minute must be positive")


def parse_listen(value: str | None, agent_url: str) -> Listen:
    """`HOST:PORT`; by default loopback, on the port of --agent-url."""
    if value is None:
        port = urlsplit(agent_url).port or (443 if agent_url.startswith("https") else 80)
        return Listen("127.0.0.1", port)
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise K8sOptionsError(f"--agent-listen {value!r}: expected HOST:PORT, e.g. 0.0.0.0:8123")
    return Listen(host.strip("[]"), int(port_text))
