"""What a Job's pod leaves open that `--sandbox bwrap` closes for a local agent (docs/security.md): the
check the example Job templates are held to."""

from __future__ import annotations

from typing import Any


def lockdown_gaps(job: dict[str, Any]) -> list[str]:
    """What the pod leaves open that the local sandbox closes; empty when nothing."""
    pod = job["spec"]["template"]["spec"]
    gaps = []
    if pod.get("automountServiceAccountToken") is not False:
        gaps.append("automountServiceAccountToken")  # the API server's token in the pod
    if pod.get("enableServiceLinks") is not False:
        gaps.append("enableServiceLinks")  # every Service's address in the environment
    gaps += [key for key in ("hostPID", "hostIPC", "hostNetwork", "shareProcessNamespace") if pod.get(key)]
    security = pod.get("securityContext") or {}
    if security.get("runAsNonRoot") is not True or security.get("runAsUser") == 0:
        gaps.append("runAsNonRoot")
    if (security.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        gaps.append("seccompProfile")
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    gaps += [f"volume {name}" for name, volume in volumes.items() if set(volume) != {"name", "emptyDir"}]
    for container in [*pod["containers"], *(pod.get("initContainers") or [])]:
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            gaps.append("allowPrivilegeEscalation")
        if context.get("readOnlyRootFilesystem") is not True:
            gaps.append("readOnlyRootFilesystem")
        capabilities = context.get("capabilities") or {}
        if capabilities.get("drop") != ["ALL"] or capabilities.get("add"):
            gaps.append("capabilities")
        if context.get("privileged"):
            gaps.append("privileged")
        limits = (container.get("resources") or {}).get("limits") or {}
        gaps += [f"limits.{kind}" for kind in ("cpu", "memory") if kind not in limits]
        if container.get("envFrom"):
            gaps.append("envFrom")
    return gaps
