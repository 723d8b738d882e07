"""On Kubernetes the Job template and the NetworkPolicy give an agent's pod what `--sandbox bwrap` gives a
local agent (docs/security.md): the demo's Job, as Tether submits it, and its NetworkPolicy, checked
against the Kubernetes schema and field by field. The test API server does not enforce them (see
docs/kubernetes.md, "How this is tested"): what these tests show is that the objects ask for it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.runner.k8s.apiserver import KUBERNETES_VERSION, iter_env
from tests.runner.k8s.lockdown import lockdown_gaps
from tether.runner.k8s.manifest import AttemptRef, JobSettings, JobTemplate, build_job

ROOT = Path(__file__).parents[3]
DEMO = ROOT / "examples" / "arith_agent"
POLICY = DEMO / "k8s-networkpolicy.yaml"
GATEWAY_PORT = 8123  # docs/kubernetes.md's --agent-listen "$HOST_IP:8123"
TOKEN = "tro-secret-token"


def demo_job(source: str | None = None) -> dict[str, Any]:
    """The demo template's Job for one attempt, with Tether's fields forced on it, as it is submitted."""
    template = JobTemplate(source or (DEMO / "k8s-job.yaml.j2").read_text())
    rollout = {"id": "ro-0123456789abcdef", "attempt": 1, "run": "train-arith", "mode": "train"}
    context = {"task": {"question": "2+2?"}, "rollout": rollout, "command": ["python", "/app/agent.py"]}
    ref = AttemptRef("ro-0123456789abcdef", 1, "train-arith")
    env = {"OPENAI_BASE_URL": "http://host.minikube.internal:8123/rollouts/ro-0123456789abcdef/v1"}
    env |= {"OPENAI_API_KEY": TOKEN, "TETHER_TASK": '{"question": "2+2?"}'}
    rendered = template.render({**context, "job_name": ref.job_name})
    job = build_job(rendered, ref, env, TOKEN, JobSettings("agents", 120, 600))
    kubernetes_validate.validate(job, KUBERNETES_VERSION, strict=True)
    return job


def test_the_demo_job_is_locked_down_as_the_local_sandbox() -> None:
    job = demo_job()
    pod = job["spec"]["template"]["spec"]
    assert lockdown_gaps(job) == []
    # its one writable place is its own scratch directory, empty for each pod; no volume holds the project
    (container,) = pod["containers"]
    assert container["volumeMounts"] == [{"name": "scratch", "mountPath": "/tmp"}]
    assert pod["volumes"][0]["emptyDir"]["sizeLimit"]
    # its environment is Tether's variables for the attempt and nothing else; the token from the Secret
    assert {entry["name"] for entry in iter_env(job)} == {"OPENAI_BASE_URL", "OPENAI_API_KEY", "TETHER_TASK"}
    (key,) = [e for e in iter_env(job) if e["name"] == "OPENAI_API_KEY"]
    assert "value" not in key and key["valueFrom"]["secretKeyRef"]["name"] == job["metadata"]["name"]
    # and it dies with the agent: never restarted, never retried, within the deadline
    assert pod["restartPolicy"] == "Never" and job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 120


@pytest.mark.parametrize(
    ("line", "gap"),
    [
        ("      automountServiceAccountToken: false\n", "automountServiceAccountToken"),
        ("        runAsNonRoot: true\n", "runAsNonRoot"),
        ("            allowPrivilegeEscalation: false\n", "allowPrivilegeEscalation"),
        ("            readOnlyRootFilesystem: true\n", "readOnlyRootFilesystem"),
        ('              drop: ["ALL"]\n', "capabilities"),
    ],
)
def test_a_template_without_one_of_the_settings_is_found_open(line: str, gap: str) -> None:
    """The check above can fail: the demo template without each line of its lockdown."""
    source = (DEMO / "k8s-job.yaml.j2").read_text()
    assert line in source
    weakened = source.replace(line, "" if gap != "capabilities" else '              drop: ["NET_RAW"]\n')
    assert gap in lockdown_gaps(demo_job(weakened))


def test_the_demo_networkpolicy_lets_agent_pods_reach_only_the_gateway_and_dns() -> None:
    policy = yaml.safe_load(POLICY.read_text().replace("HOST_IP", "192.168.49.1"))
    kubernetes_validate.validate(policy, KUBERNETES_VERSION, strict=True)
    spec = policy["spec"]
    # it selects the demo's agent pods, and only them
    pod_labels = demo_job()["spec"]["template"]["metadata"]["labels"]
    selector = spec["podSelector"]["matchLabels"]
    assert selector and selector.items() <= pod_labels.items() and "tether/agent-pod" in selector
    # nothing comes in; what goes out goes to one address and the gateway's port, or to the cluster's DNS
    assert sorted(spec["policyTypes"]) == ["Egress", "Ingress"] and spec["ingress"] == []
    gateway, dns = spec["egress"]
    assert gateway == {
        "to": [{"ipBlock": {"cidr": "192.168.49.1/32"}}],
        "ports": [{"protocol": "TCP", "port": GATEWAY_PORT}],
    }
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert {p["port"] for p in dns["ports"]} == {53}


def test_the_networkpolicy_in_the_docs_is_the_shipped_one() -> None:
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", docs, re.DOTALL)
    (shown,) = [yaml.safe_load(b) for b in blocks if "kind: NetworkPolicy" in b]
    assert shown == yaml.safe_load(POLICY.read_text())
    assert "examples/arith_agent/k8s-networkpolicy.yaml" in docs
