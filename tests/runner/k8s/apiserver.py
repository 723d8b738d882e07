"""A local Kubernetes API server for the tests: the endpoints the k8s runner uses, over real HTTP.

It serves batch/v1 Jobs, core/v1 Pods (and their logs), Secrets and Namespaces, SelfSubjectAccessReview,
and `?watch=true` streams of JSON lines with resourceVersions. A watch from a resourceVersion continues
after it; a watch without one (or from "0") starts with the current objects as ADDED, as the API server's
watch cache does. History is kept from `compacted` on: a watch from an older resourceVersion is answered
with an ERROR event carrying a 410 Expired Status (`expire_watches` compacts and ends the open watches
that way, `expire_next_watches` answers the next ones so). Deleting honours `propagationPolicy`
(Background and Foreground delete what the object owns, Orphan keeps it and drops its ownerReferences;
a Job's default is Orphan, as batch/v1's is). Every submitted object is validated
against the Kubernetes OpenAPI schema of KUBERNETES_VERSION (`kubernetes-validate`, strict: unknown fields
are refused, as `kubectl --validate=strict` does) and refused with a 422 Status otherwise.

Its "node" really runs each pod's container `command` + `args` as a local process, with the pod's env
(secretKeyRef read from the namespace's Secrets; a pod waits while its Secret is missing, as the kubelet
does), and moves the Job through Active -> Complete / Failed. `activeDeadlineSeconds` kills the process
and fails the Job with DeadlineExceeded; deleting a Job kills its pods and deletes what it owns (pods,
Secrets with an ownerReference to it). Images not in `images` fail to pull (ErrImagePull, then
ImagePullBackOff), and stay pending.

docs/kubernetes.md ("How this is tested") lists what it does not model.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

KUBERNETES_VERSION = "1.37.0"
TOKEN = "test-cluster-token"
SECRET_WAIT_S = 20.0
WATCH_POLL_S = 0.05
API_VERSIONS = {"jobs": "batch/v1", "pods": "v1", "secrets": "v1"}
KINDS = {"jobs": "Job", "pods": "Pod", "secrets": "Secret"}


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str) -> JSONResponse:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    return JSONResponse(body, status_code=code)


NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def semantic_error(obj: dict[str, Any]) -> str | None:
    """What the API server checks beyond the schema (a few of its rules): names and label values."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name", "")
    if not NAME.match(name) or len(name) > 253:
        return f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 subdomain"
    for where in (metadata, obj.get("spec", {}).get("template", {}).get("metadata") or {}):
        for key, value in (where.get("labels") or {}).items():
            if len(value) > 63 or not LABEL_VALUE.match(value):
                return f"metadata.labels: Invalid value: {value!r}: a valid label value for {key}"
    return None


def matches(obj: dict[str, Any], selector: str | None) -> bool:
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (selector or "").split(",")):
        key, _, value = term.partition("=")
        if labels.get(key) != value:
            return False
    return True


@dataclass
class Event:
    version: int
    resource: str
    namespace: str
    type: str
    obj: dict[str, Any]


@dataclass
class Answered:
    """One list or watch the server answered, in order: what the tests read to see relisting."""

    verb: str  # "list" or "watch"
    resource: str
    version: int  # list: the version answered; watch: the version asked for (0: none)
    expired: bool = False  # watch: answered 410 Expired, at once or when compacted under it


def expired_status(asked: int, oldest: int) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {asked} ({oldest})",
        "reason": "Expired",
        "code": 410,
    }


DEFAULT_PROPAGATION = {"jobs": "Orphan"}  # batch/v1 Jobs orphan their pods unless told otherwise


@dataclass
class Cluster:
    """The cluster's state. Tests read it (`submitted`, `created`, `objects`) and shape it (`images`,
    `allowed`, `namespaces`, `create_failures`)."""

    workdir: Path
    namespaces: set[str] = field(default_factory=lambda: {"default"})
    images: set[str] = field(default_factory=set)
    allowed: bool = True
    # (resource, HTTP status) of the next creations to refuse, in order: for the retry tests.
    create_failures: list[tuple[str, int]] = field(default_factory=list)
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    submitted: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    created: list[tuple[str, str, float]] = field(default_factory=list)  # (resource, name, time.time())
    refused: list[tuple[str, str]] = field(default_factory=list)  # (resource, why)
    version: int = 1  # etcd's revision is never 0: a list's resourceVersion never reads as "any"
    lock: threading.RLock = field(default_factory=threading.RLock)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    deleted_pods: set[str] = field(default_factory=set)
    closing: bool = False
    # Watch history: events before `compacted` are gone, and a watch from before it is answered 410.
    compacted: int = 0
    expire_next_watches: int = 0  # the next N watch requests are answered 410, whatever they ask
    requests: list[Answered] = field(default_factory=list)
    _watch_epoch: int = 0  # bumped by expire_watches: open watches of an older epoch end with a 410

    # -- state ----------------------------------------------------------------------------------------

    def _record(self, resource: str, namespace: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            key = (resource, namespace, obj["metadata"]["name"])
            if kind == "DELETED":
                self.objects.pop(key, None)
            else:
                self.objects[key] = obj
            self.events.append(Event(self.version, resource, namespace, kind, copy.deepcopy(obj)))
            return copy.deepcopy(obj)

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            return copy.deepcopy(obj) if obj is not None else None

    def listing(
        self, resource: str, namespace: str, selector: str | None
    ) -> tuple[list[dict[str, Any]], int]:
        with self.lock:
            items = [
                copy.deepcopy(obj)
                for (kind, ns, _), obj in self.objects.items()
                if kind == resource and ns == namespace and matches(obj, selector)
            ]
            return items, self.version

    def update(self, resource: str, namespace: str, name: str, change: Any) -> dict[str, Any] | None:
        with self.lock:
            obj = self.get(resource, namespace, name)
            if obj is None:
                return None
            change(obj)
            return self._record(resource, namespace, "MODIFIED", obj)

    def submitted_kinds(self) -> list[str]:
        with self.lock:
            return [kind for kind, _ in self.submitted]

    def live_jobs(self, namespace: str = "default") -> list[dict[str, Any]]:
        return self.listing("jobs", namespace, None)[0]

    # -- creating -------------------------------------------------------------------------------------

    def create(self, resource: str, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(body)
        metadata = obj.setdefault("metadata", {})
        metadata.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now_text())
        if resource == "secrets":
            data = {
                k: base64.b64encode(v.encode()).decode() for k, v in (obj.pop("stringData", {}) or {}).items()
            }
            obj["data"] = {**(obj.get("data") or {}), **data}
        if resource in ("jobs", "pods"):
            obj["status"] = {"phase": "Pending"} if resource == "pods" else {}
        with self.lock:
            self.created.append((resource, metadata["name"], time.time()))
            created = self._record(resource, namespace, "ADDED", obj)
        if resource == "jobs":
            threading.Thread(target=self._run_job, args=(namespace, created), daemon=True).start()
        elif resource == "pods" and not (metadata.get("ownerReferences")):
            threading.Thread(target=self._run_pod, args=(namespace, created, None), daemon=True).start()
        return created

    def delete(
        self, resource: str, namespace: str, name: str, propagation: str | None = None
    ) -> dict[str, Any] | None:
        """Deletes the object; what it owns goes too (the garbage collector) unless `propagation` (or
        the resource's default) is Orphan, which keeps the dependents and drops their ownerReferences."""
        policy = propagation or DEFAULT_PROPAGATION.get(resource, "Background")
        with self.lock:
            obj = self.get(resource, namespace, name)
            if obj is None:
                return None
            self._record(resource, namespace, "DELETED", obj)
            uid = obj["metadata"]["uid"]
            owned = [
                (kind, ns, child["metadata"]["name"])
                for (kind, ns, _), child in self.objects.items()
                if ns == namespace
                and any(ref.get("uid") == uid for ref in child["metadata"].get("ownerReferences") or [])
            ]
        if resource == "pods":
            self._kill(name)
        for kind, ns, child in owned:
            if policy == "Orphan":
                self.update(kind, ns, child, lambda c: _drop_owner(c, uid))
            else:
                self.delete(kind, ns, child)
        return obj

    def expire_watches(self) -> None:
        """Compacts the history up to now and ends every open watch with a 410 Expired event, as the
        API server does to a watcher whose resourceVersion fell out of its window."""
        with self.lock:
            self.compacted = self.version + 1  # `events` stays whole: it is the tests' record
            self._watch_epoch += 1

    def _kill(self, pod: str) -> None:
        with self.lock:
            self.deleted_pods.add(pod)
            process = self.processes.get(pod)
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)

    # -- the Job controller and the node --------------------------------------------------------------

    def _run_job(self, namespace: str, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        started = time.monotonic()
        deadline = job["spec"].get("activeDeadlineSeconds")
        template = job["spec"]["template"]
        labels = {
            **(template.get("metadata", {}).get("labels") or {}),
            "batch.kubernetes.io/job-name": name,
            "job-name": name,
            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
        }
        pod_name = f"{name[:50]}-{uuid.uuid4().hex[:5]}"
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job["metadata"]["uid"]}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": pod_name, "labels": labels, "ownerReferences": [owner]},
            "spec": copy.deepcopy(template["spec"]),
        }
        self.create("pods", namespace, pod)
        self.update(
            "jobs", namespace, name, lambda j: j["status"].update(active=1, startTime=now_text(), ready=0)
        )
        end = None if deadline is None else started + float(deadline)
        outcome = self._run_pod(namespace, self.get("pods", namespace, pod_name) or pod, end)
        if outcome is None:  # the Job (or its pod) was deleted
            return
        self.update("jobs", namespace, name, lambda j: _finish_job(j, outcome))

    def _run_pod(self, namespace: str, pod: dict[str, Any], end: float | None) -> str | None:
        """Runs the pod's first container; 'succeeded', 'failed' or 'deadline', None once deleted."""
        name = pod["metadata"]["name"]
        spec = pod["spec"]
        if end is None and spec.get("activeDeadlineSeconds"):
            end = time.monotonic() + float(spec["activeDeadlineSeconds"])
        container = spec["containers"][0]
        if container["image"] not in self.images:
            return self._pull_fails(namespace, name, container, end)
        env = self._wait_for_env(namespace, name, container, end)
        if env is None:
            return self._ended(namespace, name, "deadline", None)
        log = self.workdir / f"{name}.log"
        cwd = container.get("workingDir") or tempfile.mkdtemp(dir=self.workdir)
        argv = [*(container.get("command") or []), *(container.get("args") or [])]
        with log.open("wb") as sink:
            process = subprocess.Popen(
                argv, env=env, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        with self.lock:
            self.processes[name] = process
        self._set_container(namespace, name, {"running": {"startedAt": now_text()}}, "Running")
        while process.poll() is None:
            if name in self.deleted_pods:
                return None
            if end is not None and time.monotonic() > end:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return self._ended(namespace, name, "deadline", process.returncode)
            time.sleep(0.02)
        if name in self.deleted_pods:
            return None
        return self._ended(
            namespace, name, "succeeded" if process.returncode == 0 else "failed", process.returncode
        )

    def _pull_fails(
        self, namespace: str, name: str, container: dict[str, Any], end: float | None
    ) -> str | None:
        message = f'Failed to pull image "{container["image"]}": not found'
        self._set_container(
            namespace, name, {"waiting": {"reason": "ErrImagePull", "message": message}}, "Pending"
        )
        time.sleep(0.2)
        self._set_container(
            namespace, name, {"waiting": {"reason": "ImagePullBackOff", "message": message}}, "Pending"
        )
        while end is None or time.monotonic() < end:
            if name in self.deleted_pods:
                return None
            time.sleep(0.05)
        return self._ended(namespace, name, "deadline", None)

    def _wait_for_env(
        self, namespace: str, name: str, container: dict[str, Any], end: float | None
    ) -> dict[str, str] | None:
        give_up = time.monotonic() + SECRET_WAIT_S
        while True:
            env = self._resolve_env(namespace, container)
            if env is not None:
                return {"PATH": os.environ["PATH"], "HOSTNAME": name, **env}
            reason = {"waiting": {"reason": "CreateContainerConfigError", "message": "secret not found"}}
            self._set_container(namespace, name, reason, "Pending")
            if time.monotonic() > give_up or (end is not None and time.monotonic() > end):
                return None
            time.sleep(0.05)

    def _resolve_env(self, namespace: str, container: dict[str, Any]) -> dict[str, str] | None:
        env: dict[str, str] = {}
        for entry in container.get("env") or []:
            if "value" in entry:
                env[entry["name"]] = entry["value"]
                continue
            ref = (entry.get("valueFrom") or {}).get("secretKeyRef")
            if ref is None:  # configMapKeyRef, fieldRef, resourceFieldRef: not modelled, never resolved
                return None
            secret = self.get("secrets", namespace, ref["name"])
            if secret is None or ref["key"] not in (secret.get("data") or {}):
                return None
            env[entry["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        return env

    def _set_container(self, namespace: str, pod: str, state: dict[str, Any], phase: str) -> None:
        def change(obj: dict[str, Any]) -> None:
            container = obj["spec"]["containers"][0]
            entry = {
                "name": container["name"],
                "image": container["image"],
                "ready": False,
                "restartCount": 0,
            }
            entry["imageID"] = (
                "" if "waiting" in state and "Pull" in state["waiting"]["reason"] else "sha256:test"
            )
            entry["state"] = state
            obj["status"] = {"phase": phase, "containerStatuses": [entry]}

        self.update("pods", namespace, pod, change)

    def _ended(self, namespace: str, pod: str, outcome: str, code: int | None) -> str:
        if code is not None:
            state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}}
            self._set_container(namespace, pod, state, "Succeeded" if outcome == "succeeded" else "Failed")
        else:
            self.update("pods", namespace, pod, lambda p: p.setdefault("status", {}).update(phase="Failed"))
        return outcome

    # -- the HTTP API ---------------------------------------------------------------------------------

    def app(self) -> Starlette:
        prefixes = {"jobs": "/apis/batch/v1", "pods": "/api/v1", "secrets": "/api/v1"}
        routes = [Route("/api/v1/namespaces/{ns}", self._namespace, methods=["GET"])]
        for resource, prefix in prefixes.items():
            base = f"{prefix}/namespaces/{{ns}}/{resource}"
            if resource == "pods":
                routes.append(Route(base + "/{name}/log", _bound(self._log, resource), methods=["GET"]))
            routes.append(Route(base, _bound(self._collection, resource), methods=["GET", "POST"]))
            routes.append(Route(base + "/{name}", _bound(self._item, resource), methods=["GET", "DELETE"]))
        review = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
        routes.append(Route(review, self._access_review, methods=["POST"]))
        return Starlette(routes=routes)

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {TOKEN}"

    async def _namespace(self, request: Request) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        ns = request.path_params["ns"]
        if ns not in self.namespaces:
            return status(404, "NotFound", f'namespaces "{ns}" not found')
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": ns},
            "status": {"phase": "Active"},
        }
        return JSONResponse(body)

    async def _collection(self, request: Request, resource: str) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        ns = request.path_params["ns"]
        if ns not in self.namespaces:
            return status(404, "NotFound", f'namespaces "{ns}" not found')
        if request.method == "POST":
            return await self._create(request, resource, ns)
        selector = request.query_params.get("labelSelector")
        if request.query_params.get("watch", "").lower() in ("true", "1"):
            since = int(request.query_params.get("resourceVersion") or 0)
            timeout = float(request.query_params.get("timeoutSeconds") or 30)
            return StreamingResponse(
                self._watch(resource, ns, selector, since, timeout), media_type="application/json"
            )
        items, version = await asyncio.to_thread(self.listing, resource, ns, selector)
        with self.lock:
            self.requests.append(Answered("list", resource, version))
        kind = KINDS[resource] + "List"
        return JSONResponse(
            {
                "apiVersion": API_VERSIONS[resource],
                "kind": kind,
                "metadata": {"resourceVersion": str(version)},
                "items": items,
            }
        )

    async def _create(self, request: Request, resource: str, ns: str) -> Response:
        body = orjson.loads(await request.body())
        with self.lock:
            self.submitted.append((resource, copy.deepcopy(body)))
            failure = next((f for f in self.create_failures if f[0] == resource), None)
            if failure is not None:
                self.create_failures.remove(failure)
        if failure is not None:
            return status(failure[1], "InternalError", "injected failure")
        try:
            kubernetes_validate.validate(body, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path)
            self.refused.append((resource, f"{where}: {exc.message}"))
            return status(422, "Invalid", f"{KINDS[resource]} is invalid: {where}: {exc.message}")
        problem = semantic_error(body)
        if problem is not None:
            self.refused.append((resource, problem))
            return status(422, "Invalid", f"{KINDS[resource]} is invalid: {problem}")
        if body.get("kind") != KINDS[resource]:
            return status(400, "BadRequest", f"expected a {KINDS[resource]}")
        name = body.get("metadata", {}).get("name", "")
        if self.get(resource, ns, name) is not None:
            return status(409, "AlreadyExists", f'{resource} "{name}" already exists')
        created = await asyncio.to_thread(self.create, resource, ns, body)
        return JSONResponse(created, status_code=201)

    async def _item(self, request: Request, resource: str) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        ns, name = request.path_params["ns"], request.path_params["name"]
        if request.method == "DELETE":
            options = orjson.loads(await request.body() or b"{}")  # DeleteOptions, when sent
            propagation = request.query_params.get("propagationPolicy") or options.get("propagationPolicy")
            obj = await asyncio.to_thread(self.delete, resource, ns, name, propagation)
        else:
            obj = self.get(resource, ns, name)
        if obj is None:
            return status(404, "NotFound", f'{resource} "{name}" not found')
        if request.method == "DELETE" and resource != "pods":  # a deleted pod is answered with itself
            details = {"name": name, "kind": resource, "uid": obj["metadata"]["uid"]}
            return JSONResponse(
                {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": details}
            )
        return JSONResponse(obj)

    async def _log(self, request: Request, resource: str) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        ns, name = request.path_params["ns"], request.path_params["name"]
        if self.get("pods", ns, name) is None:
            return status(404, "NotFound", f'pods "{name}" not found')
        path = self.workdir / f"{name}.log"
        data = path.read_bytes() if path.exists() else b""
        limit = int(request.query_params.get("limitBytes") or 0)
        return PlainTextResponse(data[:limit] if limit else data)

    async def _access_review(self, request: Request) -> Response:
        if not self._authorized(request):
            return status(401, "Unauthorized", "Unauthorized")
        body = orjson.loads(await request.body())
        kubernetes_validate.validate(body, KUBERNETES_VERSION, strict=True)
        body["status"] = {"allowed": self.allowed, **({} if self.allowed else {"reason": "RBAC: no rule"})}
        body.setdefault("metadata", {})
        return JSONResponse(body, status_code=201)

    async def _watch(
        self, resource: str, ns: str, selector: str | None, since: int, timeout: float
    ) -> AsyncIterator[bytes]:
        deadline = time.monotonic() + timeout
        with self.lock:
            expired = self.expire_next_watches > 0 or 0 < since < self.compacted - 1
            if self.expire_next_watches > 0:
                self.expire_next_watches -= 1
            answered = Answered("watch", resource, since, bool(expired))
            self.requests.append(answered)
            epoch = self._watch_epoch
            position = since
            initial: list[dict[str, Any]] = []
            if not since and not expired:  # no version: the current state first, then what follows
                initial = self.listing(resource, ns, selector)[0]
                position = self.version
        if expired:
            yield self._error_line(since)
            return
        for obj in initial:
            yield orjson.dumps({"type": "ADDED", "object": obj}) + b"\n"
        while time.monotonic() < deadline and not self.closing:
            with self.lock:
                cut = self._watch_epoch != epoch
                fresh = [e for e in self.events if e.version > position]
            if cut:  # compacted under this watch: it ends, and its version is too old to resume from
                answered.expired = True
                yield self._error_line(position)
                return
            for event in fresh:
                position = event.version
                if event.resource == resource and event.namespace == ns and matches(event.obj, selector):
                    yield orjson.dumps({"type": event.type, "object": event.obj}) + b"\n"
            await asyncio.sleep(WATCH_POLL_S)

    def _error_line(self, asked: int) -> bytes:
        status_ = expired_status(asked, max(self.compacted, 1))
        return orjson.dumps({"type": "ERROR", "object": status_}) + b"\n"

    def stop(self) -> None:
        self.closing = True
        with self.lock:
            processes = list(self.processes.values())
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _bound(handler: Any, resource: str) -> Any:
    async def endpoint(request: Request) -> Response:
        return await handler(request, resource)

    return endpoint


def _drop_owner(obj: dict[str, Any], uid: str) -> None:
    refs = [ref for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("uid") != uid]
    if refs:
        obj["metadata"]["ownerReferences"] = refs
    else:
        obj["metadata"].pop("ownerReferences", None)


def _finish_job(job: dict[str, Any], outcome: str) -> None:
    status_ = job["status"]
    status_.update(active=0, ready=0)
    stamp = now_text()
    if outcome == "succeeded":
        status_.update(succeeded=1, completionTime=stamp)
        conditions = [("SuccessCriteriaMet", "Completed", ""), ("Complete", "Completed", "")]
    elif outcome == "deadline":
        status_.update(failed=1)
        message = "Job was active longer than specified deadline"
        conditions = [("FailureTarget", "DeadlineExceeded", message), ("Failed", "DeadlineExceeded", message)]
    else:
        status_.update(failed=1)
        message = "Job has reached the specified backoff limit"
        conditions = [
            ("FailureTarget", "BackoffLimitExceeded", message),
            ("Failed", "BackoffLimitExceeded", message),
        ]
    status_["conditions"] = [
        {"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": stamp}
        for kind, reason, message in conditions
    ]


def write_kubeconfig(path: Path, server: str) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": {"server": server}}],
        "users": [{"name": "test", "user": {"token": TOKEN}}],
        "contexts": [
            {"name": "test", "context": {"cluster": "test", "user": "test", "namespace": "default"}}
        ],
        "current-context": "test",
    }
    path.write_text(orjson.dumps(config).decode())  # JSON is YAML
    return path


def iter_env(job: dict[str, Any]) -> Iterator[dict[str, Any]]:
    pod = job["spec"]["template"]["spec"]
    for container in [*pod["containers"], *(pod.get("initContainers") or [])]:
        yield from container.get("env") or []
