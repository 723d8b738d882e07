"""The Kubernetes API as the runner uses it, through the official client (blocking; callers use threads).

The official `kubernetes` client is the maintained one, generated from the API server's OpenAPI
specification (so its models match the API), with a watch helper that resumes from resourceVersion.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, cast

import orjson
import pydantic
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

REQUEST_TIMEOUT_S = 30.0
LOG_LIMIT_BYTES = 64 * 1024


class KubeError(RuntimeError):
    """The cluster cannot be reached or configured; the message names the fix."""


def connect(kubeconfig: str | None) -> client.ApiClient:
    """`--kubeconfig FILE`; else the in-cluster service account; else the default kubeconfig."""
    if kubeconfig is not None:
        try:
            return config.new_client_from_config(config_file=kubeconfig)
        except (ConfigException, OSError) as exc:
            raise KubeError(f"--kubeconfig {kubeconfig}: {exc}") from None
    configuration = client.Configuration()
    try:
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except ConfigException:
        pass
    try:
        return config.new_client_from_config()
    except (ConfigException, OSError) as exc:
        raise KubeError(
            f"no Kubernetes configuration ({exc}): pass --kubeconfig FILE, set $KUBECONFIG, or run "
            "inside the cluster with a service account"
        ) from None


def api_error(exc: ApiException) -> str:
    """The API server's own message of an error, in one line."""
    message = exc.reason or ""
    if exc.body:
        try:
            message = orjson.loads(exc.body).get("message") or message
        except ValueError:
            pass
    return f"{exc.status} {message}".strip()


def _delete(call: Callable[..., Any], name: str, namespace: str, **options: Any) -> None:
    """Delete `name`; gone already is fine. The response (a Status or the object, depending on the
    server) is not needed: unread (`_preload_content=False`), it goes back to the connection pool."""
    try:
        call(
            name, namespace, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S, **options
        ).release_conn()
    except ApiException as exc:
        if exc.status != 404:
            raise


def invalid_job(job: dict[str, Any]) -> str | None:
    """What is wrong with this Job by the API's own schema (the client's models), or None."""
    try:
        client.V1Job.model_validate(job)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return None


def is_retryable(exc: BaseException) -> bool:
    """An error worth trying again: the server was busy or unreachable, not a refusal of the request."""
    if isinstance(exc, ApiException):
        return exc.status in (0, 408, 429) or exc.status >= 500
    return isinstance(exc, OSError) or type(exc).__module__.startswith("urllib3")


class Kube:
    """The calls the runner makes, in one namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)
        self.authz = client.AuthorizationV1Api(api)

    def close(self) -> None:
        self.api.close()

    # -- Jobs and Secrets -----------------------------------------------------------------------------

    def _create(self, call: Callable[..., Any], body: dict[str, Any]) -> Any:
        return call(self.namespace, body, _request_timeout=REQUEST_TIMEOUT_S)

    def create_job(self, body: dict[str, Any]) -> client.V1Job:
        return self._create(self.batch.create_namespaced_job, body)

    def create_secret(self, body: dict[str, Any]) -> client.V1Secret:
        return self._create(self.core.create_namespaced_secret, body)

    def delete_job(self, name: str) -> None:
        """Deletes the Job and, in the background, its pods."""
        _delete(self.batch.delete_namespaced_job, name, self.namespace, propagation_policy="Background")

    def delete_secret(self, name: str) -> None:
        _delete(self.core.delete_namespaced_secret, name, self.namespace)

    def _list(self, call: Callable[..., Any], selector: str) -> Any:
        return call(self.namespace, label_selector=selector, _request_timeout=REQUEST_TIMEOUT_S)

    def list_jobs(self, selector: str) -> tuple[list[Any], str]:
        jobs = self._list(self.batch.list_namespaced_job, selector)
        version = jobs.metadata.resource_version if jobs.metadata else None
        return list(jobs.items), version or ""

    def list_secrets(self, selector: str) -> list[Any]:
        return list(self._list(self.core.list_namespaced_secret, selector).items)

    def watch_jobs(self, selector: str, resource_version: str, timeout_s: int) -> Iterator[dict[str, Any]]:
        yield from watch.Watch().stream(
            self.batch.list_namespaced_job,
            self.namespace,
            label_selector=selector,
            resource_version=resource_version,
            timeout_seconds=timeout_s,
            _request_timeout=timeout_s + REQUEST_TIMEOUT_S,
        )

    # -- pods -----------------------------------------------------------------------------------------

    def pods(self, selector: str) -> list[Any]:
        return list(self._list(self.core.list_namespaced_pod, selector).items)

    def pod_log(self, name: str, container: str) -> str:
        text = self.core.read_namespaced_pod_log(
            name,
            self.namespace,
            container=container,
            limit_bytes=LOG_LIMIT_BYTES,
            _request_timeout=REQUEST_TIMEOUT_S,
        )
        return text if isinstance(text, str) else str(text)

    def create_pod(self, body: dict[str, Any]) -> client.V1Pod:
        return self._create(self.core.create_namespaced_pod, body)

    def read_pod(self, name: str) -> Any:
        return self.core.read_namespaced_pod(name, self.namespace, _request_timeout=REQUEST_TIMEOUT_S)

    def delete_pod(self, name: str) -> None:
        _delete(self.core.delete_namespaced_pod, name, self.namespace, grace_period_seconds=0)

    # -- preflight ------------------------------------------------------------------------------------

    def read_namespace(self) -> client.V1Namespace:
        return self.core.read_namespace(self.namespace, _request_timeout=REQUEST_TIMEOUT_S)

    def may(self, verb: str, group: str, resource: str, subresource: str | None = None) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": self.namespace,
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                    **({"subresource": subresource} if subresource else {}),
                }
            },
        }
        answer = self.authz.create_self_subject_access_review(
            cast(Any, review), _request_timeout=REQUEST_TIMEOUT_S
        )
        return bool(answer.status and answer.status.allowed)
