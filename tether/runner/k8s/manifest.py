"""The Job of one attempt: the user's Jinja template, rendered with the task and rollout, with the fields
that Tether owns forced on it (name, labels, deadline, retries, TTL, env), and the Secret holding its token.

Only what the template cannot be trusted to get right is forced: a Job that Kubernetes retries on its own
(`backoffLimit` > 0, `restartPolicy: OnFailure`) would run an attempt twice under one attempt number, a
Job without a deadline could hold a rollout forever, and a token written into the pod spec would be
readable by anyone allowed to read Jobs.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jinja2
import yaml

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "tether"
RUN_LABEL = "tether/run"
ROLLOUT_LABEL = "tether/rollout"
ATTEMPT_LABEL = "tether/attempt"
JOB_PREFIX = "tether-rollout-"
NAME_LIMIT = 63  # a Job's name becomes its pods' job-name label value, which is at most 63 characters


class TemplateError(ValueError):
    """A Job template that cannot be rendered or does not render to exactly one batch/v1 Job."""


@dataclass(frozen=True)
class AttemptRef:
    """What names one attempt's Kubernetes objects."""

    rollout_id: str
    attempt: int
    run: str | None

    @property
    def job_name(self) -> str:
        return dns_name(f"{JOB_PREFIX}{self.rollout_id}-{self.attempt}")

    @property
    def secret_name(self) -> str:
        return self.job_name  # a Secret and a Job may share a name; each Job has exactly one Secret

    def labels(self) -> dict[str, str]:
        return {
            MANAGED_BY_LABEL: MANAGED_BY,
            RUN_LABEL: label_value(self.run or ""),
            ROLLOUT_LABEL: label_value(self.rollout_id),
            ATTEMPT_LABEL: str(self.attempt),
        }


def dns_name(text: str) -> str:
    """A DNS-1123 label (lowercase alphanumerics and '-', at most 63): too long, it keeps a hash suffix."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "x"
    if len(name) <= NAME_LIMIT:
        return name
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{name[: NAME_LIMIT - 11].rstrip('-')}-{digest}"


def label_value(text: str) -> str:
    """A valid label value for any text: [A-Za-z0-9._-], alphanumeric at both ends, at most 63."""
    value = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    if len(value) <= NAME_LIMIT and value == text:
        return value
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{value[: NAME_LIMIT - 11].strip('-._')}-{digest}".strip("-")


def run_selector(run: str | None) -> str:
    return f"{MANAGED_BY_LABEL}={MANAGED_BY},{RUN_LABEL}={label_value(run or '')}"


def attempt_selector(ref: AttemptRef) -> str:
    return ",".join(f"{key}={value}" for key, value in ref.labels().items())


class JobTemplate:
    """A Jinja YAML template of a Job. Rendering sees `task` (the task's fields but its `reference`, which
    is the evaluator's only), `rollout` (id, attempt, run, mode, task_id, sample), `command` (the --agent
    command filled with the task, as a list) and `job_name`; undefined names are errors, not empty
    strings."""

    def __init__(self, source: str, origin: str = "the Job template") -> None:
        self.origin = origin
        environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        try:
            self.template = environment.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{origin}: line {exc.lineno}: {exc.message}") from None

    def render(self, context: Mapping[str, Any]) -> dict[str, Any]:
        try:
            text = self.template.render(**context)
        except jinja2.UndefinedError as exc:
            raise TemplateError(
                f"{self.origin}: {exc.message} (the template sees {', '.join(sorted(context))})"
            ) from None
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{self.origin}: {exc}") from None
        try:
            documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
        except yaml.YAMLError as exc:
            raise TemplateError(f"{self.origin} does not render to valid YAML: {exc}") from None
        return _the_one_job(documents, self.origin)


def _the_one_job(documents: list[Any], origin: str) -> dict[str, Any]:
    if len(documents) != 1:
        raise TemplateError(
            f"{origin} renders {len(documents)} YAML documents; it must render exactly one batch/v1 Job "
            "(put other objects, such as Services or ConfigMaps, in their own manifests)"
        )
    job = documents[0]
    if not isinstance(job, dict) or job.get("apiVersion") != "batch/v1" or job.get("kind") != "Job":
        found = f"{job.get('apiVersion')} {job.get('kind')}" if isinstance(job, dict) else type(job).__name__
        raise TemplateError(
            f"{origin} renders a {found}; it must render one object of apiVersion batch/v1, kind Job"
        )
    pod = job.get("spec", {}).get("template", {}).get("spec")
    containers = pod.get("containers") if isinstance(pod, dict) else None
    if not isinstance(containers, list) or not containers:
        raise TemplateError(f"{origin}: the Job has no spec.template.spec.containers")
    for container in containers:
        if not isinstance(container, dict) or not container.get("image"):
            raise TemplateError(f"{origin}: every container needs a name and an image")
    return job


@dataclass(frozen=True)
class JobSettings:
    namespace: str
    timeout_s: float
    ttl_s: int


def build_job(
    rendered: Mapping[str, Any], ref: AttemptRef, env: Mapping[str, str], token: str, settings: JobSettings
) -> dict[str, Any]:
    """The rendered Job with Tether's fields forced on it. Every env value that carries the token is read
    from the attempt's Secret instead of being written into the pod spec."""
    job = copy.deepcopy(dict(rendered))
    metadata = job.setdefault("metadata", {})
    metadata.pop("generateName", None)
    metadata["name"] = ref.job_name
    metadata["namespace"] = settings.namespace
    metadata["labels"] = {**(metadata.get("labels") or {}), **ref.labels()}
    spec = job["spec"]
    spec.update(
        backoffLimit=0,
        completions=1,
        parallelism=1,
        activeDeadlineSeconds=max(1, math.ceil(settings.timeout_s)),
        ttlSecondsAfterFinished=settings.ttl_s,
    )
    template = spec["template"]
    pod_metadata = template.setdefault("metadata", {}) or {}
    template["metadata"] = pod_metadata
    pod_metadata["labels"] = {**(pod_metadata.get("labels") or {}), **ref.labels()}
    pod = template["spec"]
    pod["restartPolicy"] = "Never"
    variables = env_entries(env, token, ref.secret_name)
    for container in [*pod["containers"], *(pod.get("initContainers") or [])]:
        kept = [e for e in container.get("env") or [] if e.get("name") not in env]
        container["env"] = [*kept, *copy.deepcopy(variables)]
    return job


def env_entries(env: Mapping[str, str], token: str, secret_name: str) -> list[dict[str, Any]]:
    return [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": secret_key(name)}}}
        if token in value
        else {"name": name, "value": value}
        for name, value in env.items()
    ]


def secret_key(variable: str) -> str:
    return variable.lower().replace("_", "-")


def build_secret(
    ref: AttemptRef, env: Mapping[str, str], token: str, namespace: str, job_uid: str | None
) -> dict[str, Any]:
    """The attempt's Secret: the env values that carry the token. Owned by its Job, so deleting the Job
    deletes it too (Tether also deletes it itself when the attempt ends)."""
    metadata: dict[str, Any] = {"name": ref.secret_name, "namespace": namespace, "labels": ref.labels()}
    if job_uid is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": ref.job_name, "uid": job_uid}
        ]
    data = {secret_key(name): value for name, value in env.items() if token in value}
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque", "metadata": metadata, "stringData": data}


def images_of(job: Mapping[str, Any]) -> list[str]:
    pod = job["spec"]["template"]["spec"]
    containers = [*pod["containers"], *(pod.get("initContainers") or [])]
    return list(dict.fromkeys(str(c["image"]) for c in containers))
