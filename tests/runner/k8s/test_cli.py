"""`--runner k8s` on the commands: the checks before anything runs (template, preflight), and an
unmodified agent trained through Jobs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import kubernetes_validate
import orjson
import pytest

from tests.runner.k8s.apiserver import KUBERNETES_VERSION, iter_env
from tests.runner.k8s.conftest import AGENT, TEMPLATE, KubeCluster, free_port
from tether.cli.main import main
from tether.runner import AgentEndpoints, CommandAgent
from tether.runner.k8s.job_agent import render_context
from tether.runner.k8s.manifest import (
    AttemptRef,
    JobSettings,
    JobTemplate,
    TemplateError,
    build_job,
    build_secret,
)
from tether.store import Rollout, SQLiteStore
from tether.store.auth import TokenAuthority

ROOT = Path(__file__).parents[3]
DEMO = ROOT / "examples" / "arith_agent"


def tasks_file(tmp_path: Path, count: int = 2, reference: bool = False) -> Path:
    """Tasks for the demo agent; with `reference`, their answers are the evaluator's only."""
    path = tmp_path / "tasks.jsonl"
    lines = [
        {"id": f"t{i}", "question": f"What is {i} plus 2?", "answer": i + 2, "q": f"q{i}"}
        for i in range(count)
    ]
    if reference:
        for line in lines:
            line["reference"] = {"answer": line.pop("answer")}
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def rollout_args(tmp_path: Path, cluster: KubeCluster, template: Path, *extra: str) -> list[str]:
    return [
        "rollout",
        "--agent",
        AGENT,
        "--tasks",
        str(tasks_file(tmp_path)),
        "--model",
        "tiny-random",
        "--project-dir",
        str(tmp_path),
        "--runner",
        "k8s",
        "--job-template",
        str(template),
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--agent-url",
        f"http://127.0.0.1:{free_port()}",
        *extra,
    ]


def refusal(args: list[str]) -> str:
    with pytest.raises(SystemExit) as raised:
        main(args)
    return str(raised.value)


def test_a_missing_image_fails_the_preflight_naming_the_fix(tmp_path: Path, cluster: KubeCluster) -> None:
    missing = tmp_path / "missing.yaml.j2"
    missing.write_text(TEMPLATE.read_text().replace("tether-test-agent:1", "registry.invalid/agent:nope"))
    message = refusal(rollout_args(tmp_path, cluster, missing))
    assert message.startswith("tether rollout: image 'registry.invalid/agent:nope' cannot be pulled")
    assert "ErrImagePull" in message and "minikube image load" in message
    assert cluster.state.submitted_kinds() == ["pods"]  # only the probe; no Job was created
    assert cluster.state.listing("pods", "default", None)[0] == []  # and the probe was deleted


def test_the_preflight_names_a_missing_namespace_and_missing_permissions(
    tmp_path: Path, cluster: KubeCluster
) -> None:
    message = refusal([*rollout_args(tmp_path, cluster, TEMPLATE), "--namespace", "agents"])
    assert "namespace 'agents' does not exist" in message and "kubectl create namespace agents" in message
    cluster.state.allowed = False
    message = refusal(rollout_args(tmp_path, cluster, TEMPLATE))
    assert "not allowed in namespace 'default': create jobs" in message and "Role" in message
    assert cluster.state.submitted_kinds() == []


def test_a_template_of_two_documents_is_refused(tmp_path: Path, cluster: KubeCluster) -> None:
    two = tmp_path / "two.yaml.j2"
    two.write_text(TEMPLATE.read_text() + "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n")
    message = refusal(rollout_args(tmp_path, cluster, two))
    assert "renders 2 YAML documents; it must render exactly one batch/v1 Job" in message
    with pytest.raises(TemplateError, match="renders a v1 Pod"):
        JobTemplate("apiVersion: v1\nkind: Pod\nspec: {}\n").render({})
    with pytest.raises(TemplateError, match="'nope' is undefined"):
        JobTemplate("x: {{ nope }}").render({"task": {}})
    assert cluster.state.submitted_kinds() == []


def test_kubernetes_options_without_the_k8s_runner_are_refused(tmp_path: Path) -> None:
    args = [
        "rollout",
        "--agent",
        AGENT,
        "--tasks",
        str(tasks_file(tmp_path)),
        "--job-template",
        str(TEMPLATE),
    ]
    assert "add --runner k8s" in refusal(args)


def test_the_demo_template_renders_a_valid_job(tmp_path: Path) -> None:
    template = JobTemplate((DEMO / "k8s-job.yaml.j2").read_text())
    task = {"question": "Tom has 3 apples and buys 4 more. How many?", "answer": 7}
    rollout = {"id": "ro-0123456789abcdef", "attempt": 2, "run": "train-arith", "mode": "train"}
    context = {"task": task, "rollout": rollout, "command": ["python", "/app/agent.py"], "job_name": "x"}
    ref = AttemptRef("ro-0123456789abcdef", 2, "train-arith")
    env = {"OPENAI_BASE_URL": "http://host.minikube.internal:8123/rollouts/ro-0123456789abcdef/attempts/2/v1"}
    env["OPENAI_API_KEY"] = "secret-token"
    job = build_job(template.render(context), ref, env, "secret-token", JobSettings("agents", 120, 600))
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    assert job["metadata"]["name"] == "tether-rollout-ro-0123456789abcdef-2"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "/app/agent.py"]
    assert "secret-token" not in orjson.dumps(job).decode()
    assert {e["name"] for e in iter_env(job)} == set(env)


def test_a_tasks_reference_reaches_neither_the_job_nor_its_secret() -> None:
    """The template sees the task without its reference, the command is filled from it, and the pod's
    environment is the local agent's: TETHER_TASK without the reference."""
    source = (
        (DEMO / "k8s-job.yaml.j2")
        .read_text()
        .replace(
            "          command: {{ command | tojson }}\n",
            "          command: {{ command | tojson }}\n"
            "          env: [{name: TASK, value: {{ task | tojson | tojson }}}]\n",
        )
    )
    assert "{{ task | tojson | tojson }}" in source  # a template that puts the whole task in the pod
    task = {"question": "What is 3 plus 4?", "reference": {"answer": "ref-7-secret"}}
    rollout = Rollout(id="ro-0123456789abcdef", task_id="t", input=task, created_at=0.0)
    ref = AttemptRef(rollout.id, 1, "train-arith")
    agent = CommandAgent("python /app/agent.py --q {question}")
    endpoints = AgentEndpoints("http://host.minikube.internal:8123", TokenAuthority.generate())
    env, token = endpoints.env(rollout, 1), endpoints.auth.rollout_token(rollout.id, 1)
    rendered = JobTemplate(source).render(render_context(rollout, 1, agent, ref.job_name))
    job = build_job(rendered, ref, env, token, JobSettings("agents", 120, 600))
    shipped = orjson.dumps([job, build_secret(ref, env, token, "agents", "uid-1")]).decode()
    assert "What is 3 plus 4?" in shipped and "ref-7-secret" not in shipped and "reference" not in shipped
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == "What is 3 plus 4?"


def test_the_demo_agent_trains_through_jobs_for_two_steps(tmp_path: Path, cluster: KubeCluster) -> None:
    cluster.state.images.add("tether-arith-agent:dev")
    args = [
        "train",
        "--agent",
        f"{sys.executable} {DEMO / 'agent.py'}",
        "--tasks",
        str(tasks_file(tmp_path, reference=True)),
        "--reward",
        f"{DEMO / 'reward.py'}:correct",
        "--model",
        "tiny-random",
        "--group-size",
        "2",
        "--tasks-per-step",
        "1",
        "--steps",
        "2",
        "--val-every",
        "0",
        "--checkpoint-every",
        "0",
        "--timeout",
        "60",
        "--project-dir",
        str(tmp_path),
        "--runner",
        "k8s",
        "--job-template",
        str(DEMO / "k8s-job.yaml.j2"),
        "--kubeconfig",
        str(cluster.kubeconfig),
        "--agent-url",
        f"http://127.0.0.1:{free_port()}",
        "--max-jobs-per-minute",
        "600",
    ]
    assert main(args) == 0
    (run_dir,) = (tmp_path / ".tether" / "runs").iterdir()
    records = [orjson.loads(line) for line in (run_dir / "metrics.jsonl").read_bytes().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2]
    jobs = [body for kind, body in cluster.state.submitted if kind == "jobs"]
    assert len(jobs) == 4  # 2 steps x 1 task x 2 samples, one Job each
    store = SQLiteStore(tmp_path / ".tether" / "store.db")
    rollouts = store.list_rollouts(run=run_dir.name, limit=100)
    assert len(rollouts) == 4 and all(r.status.value == "succeeded" for r in rollouts)
    assert all(
        store.query_spans(rollout_id=r.id, limit=100) for r in rollouts
    )  # calls came through the gateway
    assert cluster.state.listing("secrets", "default", None)[0] == []
