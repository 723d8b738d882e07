"""Rollouts run as Jobs through the real Kubernetes client against the local test API server."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kubernetes
import orjson

from tests.runner.k8s.apiserver import iter_env
from tests.runner.k8s.conftest import TEMPLATE, KubeCluster, run_rollouts
from tether.store import RolloutStatus, Task


def test_each_attempt_runs_as_a_job_and_its_output_is_the_pods_last_line(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    tasks = [Task(id=f"t{i}", input={"q": f"question {i}", "say": f"answer {i}"}) for i in range(3)]
    options = cluster.options()
    outcomes, store = run_rollouts(tmp_path, tiny_engine, options, tasks)
    assert [o.status for o in outcomes] == [RolloutStatus.succeeded] * 3
    assert [store.get_rollout(o.rollout_id).output for o in outcomes] == ["answer 0", "answer 1", "answer 2"]
    assert all(o.calls == 1 for o in outcomes)  # the agent's call reached the gateway through --agent-url
    jobs = [body for kind, body in cluster.state.submitted if kind == "jobs"]
    assert len(jobs) == 3
    for job in jobs:
        spec = job["spec"]
        assert job["metadata"]["name"].startswith("tether-rollout-")
        assert spec["backoffLimit"] == 0 and spec["template"]["spec"]["restartPolicy"] == "Never"
        assert spec["activeDeadlineSeconds"] == 60 and spec["ttlSecondsAfterFinished"] == 600
        assert job["metadata"]["labels"]["team"] == "tests"  # the template's own labels are kept
        assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tether"
        env = {e["name"]: e.get("value") for e in iter_env(job)}
        rollout = job["metadata"]["labels"]["tether/rollout"]
        assert env["OPENAI_BASE_URL"] == f"{options.agent_url}/rollouts/{rollout}/attempts/1/v1"
        names = set(env)
        assert {"OPENAI_BASE_URL", "OPENAI_API_KEY", "TETHER_TASK", "TASK_ID"} <= names
    assert cluster.state.refused == []


def test_the_token_is_never_in_the_pod_spec_and_secrets_go_with_their_jobs(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    tasks = [Task(id=f"t{i}", input={"q": f"q{i}"}) for i in range(2)]
    outcomes, _ = run_rollouts(tmp_path, tiny_engine, cluster.options(), tasks)
    assert all(o.status == RolloutStatus.succeeded for o in outcomes)
    jobs = [body for kind, body in cluster.state.submitted if kind == "jobs"]
    secrets = [body for kind, body in cluster.state.submitted if kind == "secrets"]
    assert len(secrets) == len(jobs) == 2
    tokens = {value for secret in secrets for value in secret["stringData"].values()}
    assert tokens and all(len(token) > 20 for token in tokens)
    submitted_jobs = orjson.dumps(jobs).decode()
    assert not any(token in submitted_jobs for token in tokens)
    for job in jobs:
        key = next(e for e in iter_env(job) if e["name"] == "OPENAI_API_KEY")
        assert key["valueFrom"]["secretKeyRef"]["name"] == job["metadata"]["name"]
    # Each Secret is owned by its Job, and none is left once the attempts ended.
    job_uids = {
        e.obj["metadata"]["name"]: e.obj["metadata"]["uid"]
        for e in cluster.state.events
        if e.resource == "jobs"
    }
    for secret in secrets:
        (owner,) = secret["metadata"]["ownerReferences"]
        assert owner["kind"] == "Job" and owner["uid"] == job_uids[owner["name"]]
    assert cluster.state.listing("secrets", "default", None)[0] == []
    deleted = {
        e.obj["metadata"]["name"]
        for e in cluster.state.events
        if e.resource == "secrets" and e.type == "DELETED"
    }
    assert deleted == {s["metadata"]["name"] for s in secrets}


def test_a_failed_job_keeps_its_pod_log_on_the_attempt_and_is_retried(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    tasks = [Task(id="t0", input={"q": "hard one", "exit": 3})]
    (outcome,), store = run_rollouts(tmp_path, tiny_engine, cluster.options(), tasks, max_attempts=2)
    assert outcome.status == RolloutStatus.failed and outcome.attempts == 2
    attempts = store.list_attempts(outcome.rollout_id)
    assert [a.status for a in attempts] == [RolloutStatus.failed, RolloutStatus.failed]
    for attempt in attempts:
        assert attempt.error is not None
        assert "BackoffLimitExceeded" in attempt.error and "exit code 3" in attempt.error
        assert "giving up on hard one" in attempt.error  # the tail of the pod's log


def test_the_deadline_fails_the_job_as_a_timeout(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    tasks = [Task(id="t0", input={"q": "slow", "sleep": 60})]
    (outcome,), store = run_rollouts(tmp_path, tiny_engine, cluster.options(), tasks, timeout_s=2)
    assert outcome.status == RolloutStatus.timed_out
    (attempt,) = store.list_attempts(outcome.rollout_id)
    assert attempt.error is not None and "DeadlineExceeded" in attempt.error
    (job,) = [body for kind, body in cluster.state.submitted if kind == "jobs"]
    assert job["spec"]["activeDeadlineSeconds"] == 2


async def running_jobs(cluster: KubeCluster, count: int) -> list[str]:
    """The names of `count` Jobs whose agent process is running, once there are that many."""
    while True:
        pods = cluster.state.listing("pods", "default", None)[0]
        running = [
            p["metadata"]["labels"]["job-name"]
            for p in pods
            if p.get("status", {}).get("phase") == "Running" and "job-name" in p["metadata"]["labels"]
        ]
        if len(running) >= count:
            return running
        await asyncio.sleep(0.05)


def test_a_job_deleted_mid_run_fails_its_attempt_and_the_retry_finishes_the_rollout(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    tasks = [Task(id="t0", input={"q": "q", "say": "done", "sleep": 1.5})]

    async def delete_the_job(runner: Any) -> None:
        (name,) = await running_jobs(cluster, 1)
        api = kubernetes.config.new_client_from_config(config_file=str(cluster.kubeconfig))
        batch = kubernetes.client.BatchV1Api(api)
        # As `kubectl delete job` does: the pods go with the Job (a batch/v1 Job orphans them by default).
        await asyncio.to_thread(batch.delete_namespaced_job, name, "default", propagation_policy="Background")
        api.close()

    (outcome,), store = run_rollouts(
        tmp_path, tiny_engine, cluster.options(), tasks, max_attempts=2, during=delete_the_job
    )
    assert outcome.status == RolloutStatus.succeeded and outcome.attempts == 2
    first, second = store.list_attempts(outcome.rollout_id)
    assert first.status == RolloutStatus.failed and first.error is not None and "vanished" in first.error
    assert second.status == RolloutStatus.succeeded
    assert store.get_rollout(outcome.rollout_id).output == "done"


def test_jobs_are_created_no_faster_than_the_rate_limit(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    per_minute = 150.0  # one Job every 0.4 s
    tasks = [Task(id=f"t{i}", input={"q": f"q{i}"}) for i in range(4)]
    options = cluster.options(max_jobs_per_minute=per_minute)
    outcomes, _ = run_rollouts(tmp_path, tiny_engine, options, tasks)
    assert all(o.status == RolloutStatus.succeeded for o in outcomes)
    times = sorted(at for resource, _, at in cluster.state.created if resource == "jobs")
    assert len(times) == 4
    gaps = [later - earlier for earlier, later in zip(times, times[1:], strict=False)]
    assert min(gaps) >= 60.0 / per_minute, gaps  # as the API server saw them arrive


def test_an_invalid_job_fails_its_attempt_and_server_errors_are_retried(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    task = Task(id="a", input={"q": "q"})
    # Caught by the client's models before anything is sent:
    unknown = tmp_path / "unknown.yaml.j2"
    unknown.write_text(
        TEMPLATE.read_text().replace("      containers:", "      bogusField: 1\n      containers:")
    )
    (refused,), store = run_rollouts(tmp_path, tiny_engine, cluster.options(unknown), [task])
    assert refused.status == RolloutStatus.failed and refused.attempts == 1
    assert refused.error is not None and "invalid at spec.template.spec.bogusField" in refused.error
    assert cluster.state.submitted == []
    store.close()
    # Refused by the API server (422): the attempt fails, it is not retried beyond --max-attempts.
    label = tmp_path / "label.yaml.j2"
    label.write_text(TEMPLATE.read_text().replace("team: tests", "team: not a label value!"))
    (tmp_path / "422").mkdir()
    (refused,), store = run_rollouts(tmp_path / "422", tiny_engine, cluster.options(label), [task])
    assert refused.status == RolloutStatus.failed and refused.attempts == 1
    assert refused.error is not None and "422" in refused.error and "label value" in refused.error
    assert [kind for kind, _ in cluster.state.refused] == ["jobs"]
    store.close()
    # Server errors (5xx) are retried with backoff: the attempt goes on.
    cluster.state.create_failures = [("jobs", 500), ("jobs", 503), ("secrets", 500)]
    (tmp_path / "again").mkdir()
    (retried,), _ = run_rollouts(tmp_path / "again", tiny_engine, cluster.options(), [task])
    assert retried.status == RolloutStatus.succeeded and retried.attempts == 1
    assert cluster.state.create_failures == []


def test_stopping_the_run_deletes_its_jobs_and_secrets(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    tasks = [Task(id=f"t{i}", input={"q": f"q{i}", "sleep": 60}) for i in range(2)]

    async def stop(runner: Any) -> None:
        await running_jobs(cluster, 2)
        await runner.stop()

    outcomes, _ = run_rollouts(tmp_path, tiny_engine, cluster.options(), tasks, during=stop)
    assert [o.status for o in outcomes] == [RolloutStatus.cancelled] * 2
    assert cluster.state.live_jobs() == []
    assert cluster.state.listing("secrets", "default", None)[0] == []
    assert cluster.state.listing("pods", "default", None)[0] == []


def test_an_expired_watch_is_relisted_and_watched_again_from_the_lists_version(
    tmp_path: Path, cluster: KubeCluster, tiny_engine: Any
) -> None:
    """The runner's first watch is answered 410 Expired (as when the API server compacts between a list
    and a watch), and the watch it has open while the Job runs is ended with a 410. The periodic list is
    off, so only relisting and watching again can tell the runner how the Job ended."""
    cluster.state.expire_next_watches = 1
    tasks = [Task(id="t0", input={"q": "q", "say": "done", "sleep": 1.5})]

    async def expire_while_running(runner: Any) -> None:
        await running_jobs(cluster, 1)
        cluster.state.expire_watches()

    options = cluster.options(resync_s=3600.0)
    (outcome,), store = run_rollouts(
        tmp_path, tiny_engine, options, tasks, timeout_s=30, during=expire_while_running
    )
    assert outcome.status == RolloutStatus.succeeded and outcome.attempts == 1
    assert store.get_rollout(outcome.rollout_id).output == "done"
    answered = [r for r in cluster.state.requests if r.resource == "jobs"]
    watches = [r for r in answered if r.verb == "watch"]
    assert [w.expired for w in watches[:2]] == [True, True], answered  # at once, then mid-run
    assert not watches[-1].expired
    assert watches[-1].version >= cluster.state.compacted - 1  # from after the compaction
    for before, request in zip(answered, answered[1:], strict=False):
        if request.verb == "watch":  # every watch starts from the version the list before it answered
            assert before.verb == "list" and request.version == before.version, answered
        if before.verb == "watch" and before.expired:  # and an expired watch is followed by a relist
            assert request.verb == "list", answered
