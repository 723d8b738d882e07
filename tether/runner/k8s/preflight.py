"""Checks before a batch: the namespace exists, this identity may do what the runner does, and the Job's
images can be pulled. A missing image otherwise shows up only as Jobs that never start."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Mapping
from typing import Any

from kubernetes.client.rest import ApiException

from tether.runner.k8s.api import Kube, KubeError, api_error
from tether.runner.k8s.manifest import MANAGED_BY, MANAGED_BY_LABEL, images_of

ROLE_HINT = "apply the Role and RoleBinding of docs/kubernetes.md to the service account Tether runs as"
# (verb, API group, resource, subresource): what the runner does in its namespace.
NEEDED: tuple[tuple[str, str, str, str | None], ...] = (
    *((verb, "batch", "jobs", None) for verb in ("create", "get", "list", "watch", "delete")),
    *((verb, "", "secrets", None) for verb in ("create", "list", "delete")),
    *((verb, "", "pods", None) for verb in ("create", "get", "list", "delete")),
    ("get", "", "pods", "log"),
)
PULL_FAILURES = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})
# Pod fields kept on the probe so that it is pulled and scheduled as the Job's pods would be.
PROBE_POD_FIELDS = ("imagePullSecrets", "serviceAccountName", "nodeSelector", "tolerations", "affinity")
POLL_S = 0.5
PROBE_DEADLINE_S = 600  # the cluster's own limit on a probe left behind; Tether waits less and deletes it


class PreflightError(KubeError):
    pass


def preflight(kube: Kube, job: Mapping[str, Any], image_timeout_s: float) -> None:
    """Raises PreflightError naming the fix, or returns when a batch of this Job can run."""
    check_namespace(kube)
    check_access(kube)
    check_images(kube, job, image_timeout_s)


def check_namespace(kube: Kube) -> None:
    try:
        kube.read_namespace()
    except ApiException as exc:
        if exc.status == 404:
            raise PreflightError(
                f"namespace {kube.namespace!r} does not exist: create it (kubectl create namespace "
                f"{kube.namespace}) or pass --namespace"
            ) from None
        if exc.status != 403:  # may not read namespaces: the access review below tells what matters
            raise PreflightError(f"cannot reach the Kubernetes API: {api_error(exc)}") from None
    except OSError as exc:
        raise PreflightError(f"cannot reach the Kubernetes API: {exc}") from None


def check_access(kube: Kube) -> None:
    missing = [
        f"{verb} {resource}{'/' + sub if sub else ''}"
        for verb, group, resource, sub in NEEDED
        if not kube.may(verb, group, resource, sub)
    ]
    if missing:
        raise PreflightError(
            f"not allowed in namespace {kube.namespace!r}: {', '.join(missing)}; {ROLE_HINT}"
        )


def check_images(kube: Kube, job: Mapping[str, Any], timeout_s: float) -> None:
    for image in images_of(job):
        probe_image(kube, job, image, timeout_s)


def probe_pod(job: Mapping[str, Any], image: str) -> dict[str, Any]:
    """A pod that only needs its image: once the container has been created, the image was pulled."""
    pod = job["spec"]["template"]["spec"]
    policies = [
        c["imagePullPolicy"] for c in pod["containers"] if c.get("image") == image and "imagePullPolicy" in c
    ]
    container: dict[str, Any] = {"name": "probe", "image": image, "command": ["true"]}
    if policies and policies[0]:
        container["imagePullPolicy"] = policies[0]
    digest = hashlib.sha256(image.encode()).hexdigest()[:10]
    spec = {key: pod[key] for key in PROBE_POD_FIELDS if key in pod}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"tether-preflight-{digest}-{uuid.uuid4().hex[:8]}",
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, "tether/preflight": digest},
        },
        "spec": {
            **spec,
            "restartPolicy": "Never",
            "activeDeadlineSeconds": PROBE_DEADLINE_S,
            "containers": [container],
        },
    }


def probe_image(kube: Kube, job: Mapping[str, Any], image: str, timeout_s: float) -> None:
    body = probe_pod(job, image)
    name = body["metadata"]["name"]
    try:
        kube.create_pod(body)
    except ApiException as exc:
        raise PreflightError(f"cannot start the image probe pod: {api_error(exc)}") from None
    try:
        _wait_for_pull(kube, name, image, timeout_s)
    finally:
        kube.delete_pod(name)


def _wait_for_pull(kube: Kube, name: str, image: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last = "pending"
    while time.monotonic() < deadline:
        pod = kube.read_pod(name)
        verdict = pull_verdict(pod)
        if verdict is True:
            return
        if isinstance(verdict, str) and verdict.split(":")[0] in PULL_FAILURES:
            raise PreflightError(
                f"image {image!r} cannot be pulled ({verdict}): build and push it (docs/kubernetes.md), "
                "or load it into the cluster (minikube image load / kind load docker-image), and check "
                "its name, tag and imagePullSecrets"
            )
        last = verdict or (pod.status.phase if pod.status else None) or last
        time.sleep(POLL_S)
    raise PreflightError(
        f"image {image!r}: the probe pod did not start within {timeout_s:g}s ({last}); check that a "
        "node can schedule the Job's pods (kubectl describe pod) or raise --preflight-timeout"
    )


def pull_verdict(pod: Any) -> bool | str | None:
    """True once the image is on the node; the waiting reason (and message) while it is not."""
    status = pod.status
    if status is None:
        return None
    for container in status.container_statuses or []:
        state = container.state
        if container.image_id or (state and (state.running or state.terminated)):
            return True
        waiting = state.waiting if state else None
        if waiting is not None and waiting.reason:
            return f"{waiting.reason}: {waiting.message}" if waiting.message else waiting.reason
    return True if status.phase in ("Running", "Succeeded") else None
