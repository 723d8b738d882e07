"""The coding_agent example, with real processes throughout: tasks generated from toolz's real sdist (its own
tests run by pytest), the mini-SWE-agent-style agent run by `tether rollout --sandbox bwrap` against the
scripted teacher and against hostile models, and the evaluator running the hidden tests under bubblewrap.

One sandboxed `tether rollout` serves most tests: the teacher fixes three training tasks; on held-out tasks
a hostile model rewrites the tests, loops forever, or hunts for the hidden tests and the reference. Each
attack has its control: the same attack unsandboxed, or what a naive evaluator would have scored."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.examples.support import ROOT, Example, Finished, finished
from tests.helpers import serve_app
from tests.runner.k8s.apiserver import Cluster, iter_env, write_kubeconfig
from tests.runner.k8s.conftest import free_port
from tests.runner.k8s.lockdown import lockdown_gaps
from tether.store import RolloutStatus
from tether.teacher import Reply, normalize, teacher_app

CODING = Example("coding_agent")
load = CODING.load
AGENT = CODING.agent("--command-timeout", "4", "--max-turns", "4")
REWARD = CODING.reward("fixed")
CODING_IMAGE = "tether-coding-agent:dev"
MARKER = f"coding-agent-test-{secrets.token_hex(4)}"  # in the hostile model's daemon's command line
ISSUE = re.compile(r"<issue>\s*(.*?)\s*</issue>", re.DOTALL)
TEST_CONFTEST = """cat > conftest.py <<'EOF'
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None
EOF"""
FAKE_TESTS = (
    "mkdir -p toolz/tests && printf 'def test_anything():\\n    pass\\n' > toolz/tests/test_itertoolz.py"
)


def bash(command: str) -> Reply:
    return Reply(content=f"THOUGHT: next.\n\n```bash\n{command}\n```")


# -- the workspace, the sdist and the generated tasks --------------------------------------------------


@pytest.fixture(scope="module")
def workspace() -> Iterator[Path]:
    """A folder outside /tmp (which the sandbox empties anyway), where a real project would be."""
    (ROOT / "build").mkdir(exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="coding-agent-test-", dir=ROOT / "build"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def project(workspace: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project, with the sdist in `sdist/` where tasks.py keeps it: fetched from pip once per machine
    (kept beside pytest's temporary folders, checked against its sha256) and copied in."""
    cache = tmp_path_factory.getbasetemp().parent / "coding-agent-sdist"
    sdist = load("tasks").fetch_sdist(cache)
    (workspace / "project" / "sdist").mkdir(parents=True)
    shutil.copy(sdist, workspace / "project" / "sdist" / sdist.name)
    return workspace / "project"


@dataclass(frozen=True)
class Generated:
    train: list[dict[str, Any]]
    val: list[dict[str, Any]]
    summary: str

    def count(self, what: str) -> int:
        found = re.search(rf"(\d+) {what}", self.summary)
        assert found, self.summary
        return int(found.group(1))


def generate(
    out_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(CODING.dir / "tasks.py"), "--out-dir", str(out_dir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def read_tasks(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def generated(project: Path) -> Generated:
    """tasks.py at a small size, offline: pip is pointed at a dead index, so the sdist must come from the
    project's cache."""
    dead_index = {**os.environ, "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_NO_INDEX": "1"}
    done = generate(project / "data", "--train", "3", "--val", "3", "--seed", "0", env=dead_index)
    assert done.returncode == 0, done.stdout + done.stderr
    data = project / "data"
    return Generated(read_tasks(data / "train.jsonl"), read_tasks(data / "val.jsonl"), done.stdout.strip())


def hidden_files(task: dict[str, Any]) -> dict[str, bytes]:
    return load("reward").unpack(task["reference"]["tests"])


def working_files(task: dict[str, Any]) -> dict[str, bytes]:
    return load("reward").unpack(task["repo"]["archive"])


def test_the_generator_keeps_only_mutants_that_fail_tests_and_splits_by_module(generated: Generated) -> None:
    tasks = load("tasks")
    assert len(generated.train) == 3 and len(generated.val) == 3
    assert {t["reference"]["file"] for t in generated.train} <= set(tasks.TRAIN_MODULES)
    assert {t["reference"]["file"] for t in generated.val} <= set(tasks.VAL_MODULES)
    assert not set(tasks.TRAIN_MODULES) & set(tasks.VAL_MODULES)
    kept, survived = generated.count("kept"), generated.count("failed no test")
    assert kept == 6 and generated.count("mutants tried") == kept + survived + generated.count("hung")
    assert survived >= 1, f"seed 0 no longer tries a mutant that fails no test: {generated.summary}"
    for task in generated.train + generated.val:
        reference = task["reference"]
        assert reference["fail_to_pass"] and set(reference["fail_to_pass"]).isdisjoint(
            reference["pass_to_pass"]
        )
        listed = [line[2:] for line in task["issue"].splitlines() if line.startswith("- ")]
        assert listed == reference["fail_to_pass"]  # the failing tests' names are the issue
        assert reference["buggy"] != reference["original"]
        assert reference["mutation"] in tasks.KINDS
        files = working_files(task)
        assert files[reference["file"]].decode().count(reference["buggy"]) == 1
        assert not any(path in files for path in hidden_files(task) if path.endswith(".py"))  # no test code
        assert not [path for path in files if ".git" in path.split("/")]  # no history to read the fix from
        assert set(task) == {"id", "issue", "library", "repo", "reference"} and set(task["repo"]) == {
            "name",
            "archive",
        }
    assert len({t["id"] for t in generated.train + generated.val}) == 6


@pytest.mark.bwrap
def test_a_tasks_failing_tests_fail_on_its_buggy_tree_and_the_others_pass(generated: Generated) -> None:
    """The evaluator, in the sandbox, on the working copy as given (a comment added to its README)."""
    task = generated.train[0]
    readme = working_files(task)["README.rst"]
    patch = load("agent").diff({"README.rst": readme}, {"README.rst": b".. nothing\n" + readme})
    verdict = load("reward").fixed(task, json.dumps({"patch": patch}))
    assert verdict == {
        "reward": 0.0,
        "fail_to_pass": 0.0,
        "pass_to_pass": 1.0,
        "tampered": 0.0,
        "unverified": 0.0,
    }


def test_a_task_whose_original_tests_already_fail_is_refused(project: Path, tmp_path: Path) -> None:
    tasks = load("tasks")
    source = tmp_path / "broken-toolz"
    tasks.write_files(source, tasks.read_sdist(project / "sdist" / tasks.SDIST))
    test_file = source / "toolz" / "tests" / "test_dicttoolz.py"
    text = test_file.read_text()
    broken = "D({3: 4}), **kw) == D({1: 1, 2: 2, 3: 4})"
    assert text.count(broken) == 1
    test_file.write_text(text.replace(broken, broken[:-3] + "5})"))  # expects 3: 5, so test_merge fails
    out = tmp_path / "refused"
    done = generate(out, "--source", str(source), "--only", "merge,valmap", "--train", "2", "--val", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused ")]
    assert len(refused) == 1 and refused[0].startswith("refused toolz/dicttoolz.py:merge: ")
    assert "toolz/tests/test_dicttoolz.py::TestDict::test_merge" in refused[0]
    written = read_tasks(out / "train.jsonl")
    assert written and {t["reference"]["function"] for t in written} == {"valmap"}  # never one on merge


# -- the rollouts: the teacher, and hostile models ------------------------------------------------------


@dataclass
class Model:
    """The upstream of the sandboxed run: the example's teacher for the training tasks, scripted hostile
    commands for the others; every request it gets is kept (their messages hold what the commands saw)."""

    teacher: Any
    hostile: dict[str, list[str]]
    requests: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def __call__(self, request: dict[str, Any]) -> Reply:
        issue = normalize(ISSUE.search(request["messages"][1]["content"]).group(1))  # type: ignore[union-attr]
        self.requests.setdefault(issue, []).append(request)
        if issue not in self.hostile:
            return self.teacher(request)
        commands = self.hostile[issue]
        turn = sum(message["role"] == "assistant" for message in request["messages"])
        return bash(commands[min(turn, len(commands) - 1)])

    def seen(self, task: dict[str, Any]) -> str:
        """Everything the agent's commands printed for `task`'s model."""
        messages = self.requests[normalize(task["issue"])][-1]["messages"]
        return "\n".join(m["content"] for m in messages[2:] if m["role"] == "user")


@dataclass
class Run:
    model: Model
    rollouts: dict[str, Finished]  # by task id
    survivors: list[int]  # processes of the looping model's daemon, right after the run
    escaped: bool  # whether the looping model's write outside its working copy landed

    def rewards(self, task: dict[str, Any]) -> dict[str, float]:
        return self.rollouts[task["id"]].reward_values

    def output(self, task: dict[str, Any]) -> dict[str, Any]:
        return json.loads(self.rollouts[task["id"]].rollout.output or "{}")


def seeker(project: Path, task_file: Path, canary: str) -> list[str]:
    sdist = project / "sdist" / load("tasks").SDIST
    environ = "tr '\\0' '\\n' < /proc/$PPID/environ | grep '^TETHER_TASK='"
    return [
        f"cat {task_file}",
        f"tar xzOf {sdist} toolz-1.2.0/toolz/tests/test_itertoolz.py | head -c 4000; ls -la {project}",
        f"{environ} | cut -c1-100; {environ} | grep -c '\"reference\"'",
        f"grep -rl {canary} {project.parent} 2>/dev/null | head; echo searched",
        "submit",
    ]


def looper(workspace: Path) -> list[str]:
    daemon = f"setsid nohup sh -c 'while :; do :; done' {MARKER} >/dev/null 2>&1 &"
    # `sleep 1`: the daemon has left the command's process group (which the agent kills) before it ends
    escape = f"echo escaped > {escape_file(workspace)}"
    return [
        f"{daemon} sleep 1; {escape}",
        "while :; do :; done",
        "echo still looping",
        "while true; do :; done",
    ]


def escape_file(workspace: Path) -> Path:
    return workspace / f"escaped-{MARKER}.txt"


def with_canary(task: dict[str, Any], canary: str) -> dict[str, Any]:
    return {**task, "reference": {**task["reference"], "canary": canary}}


def rollout(
    project: Path, model: Model, tasks: list[dict[str, Any]], run: str, *sandbox: str
) -> dict[str, Finished]:
    task_file = project / "data" / f"{run}.jsonl"
    assert task_file.is_file()
    command = [
        *(sys.executable, "-m", "tether.cli.main", "rollout", "--project-dir", str(project)),
        *("--agent", AGENT, "--tasks", str(task_file), "--reward", REWARD, "--run", run),
        *("--n-workers", str(len(tasks)), "--timeout", "120", "--upstream-model", "teacher", *sandbox),
    ]
    with serve_app(teacher_app(model)) as url:
        done = subprocess.run(
            [*command, "--upstream", f"{url}/v1"], capture_output=True, text=True, timeout=400
        )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    rollouts = {f.rollout.task_id: f for f in finished(project) if f.rollout.run == run}
    assert len(rollouts) == len(tasks)
    for task_id, rollout in rollouts.items():  # every agent ended by itself, none by the 120 s timeout
        assert rollout.rollout.status == RolloutStatus.succeeded, (task_id, rollout.rollout.error)
    return rollouts


@pytest.fixture(scope="module")
def canary() -> str:
    return f"canary-{secrets.token_hex(8)}"


@pytest.fixture(scope="module")
def sandboxed(project: Path, workspace: Path, generated: Generated, canary: str) -> Run:
    """Three training tasks for the teacher; on held-out tasks, one model that rewrites the tests, one that
    loops forever and one that hunts for the hidden tests and the reference. In the sandbox."""
    tamper, loop, seek = generated.val
    tasks = [with_canary(task, canary) for task in generated.train + generated.val]
    task_file = project / "data" / "sandboxed.jsonl"
    task_file.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    hostile = {
        normalize(tamper["issue"]): [FAKE_TESTS, TEST_CONFTEST, "submit"],
        normalize(loop["issue"]): looper(workspace),
        normalize(seek["issue"]): seeker(project, task_file, canary),
    }
    model = Model(load("teacher").CodingTeacher(generated.train), hostile)
    # Cold: the seeker reads its agent's environment from /proc/$PPID/environ, which for a warm child is
    # the warm interpreter's start-up environment, not the one the child runs with.
    rollouts = rollout(project, model, tasks, "sandboxed", "--sandbox", "bwrap", "--agent-cold")
    return Run(model, rollouts, processes_with(MARKER), escape_file(workspace).exists())


@pytest.fixture(scope="module")
def unsandboxed(project: Path, workspace: Path, generated: Generated, canary: str) -> Run:
    """The looping and the hunting models again, without the sandbox: the controls."""
    _, loop, seek = generated.val
    tasks = [with_canary(task, canary) for task in (loop, seek)]
    task_file = project / "data" / "open.jsonl"
    task_file.write_text("".join(json.dumps(task) + "\n" for task in tasks))
    hostile = {
        normalize(loop["issue"]): looper(workspace),
        normalize(seek["issue"]): seeker(project, task_file, canary),
    }
    model = Model(load("teacher").CodingTeacher([]), hostile)
    try:
        rollouts = rollout(project, model, tasks, "open", "--sandbox", "none")
        run = Run(model, rollouts, processes_with(MARKER), escape_file(workspace).exists())
    finally:
        for pid in processes_with(MARKER):  # the daemon the looping model left (this test started it)
            os.kill(pid, signal.SIGKILL)
        escape_file(workspace).unlink(missing_ok=True)
    return run


def processes_with(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "cmdline").read_bytes():
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


@pytest.mark.bwrap
def test_the_teacher_through_tether_rollout_fixes_its_tasks_and_scores_1(
    sandboxed: Run, generated: Generated
) -> None:
    for task in generated.train:
        done = sandboxed.rollouts[task["id"]]
        assert done.reward_values == {
            "reward": 1.0,
            "fail_to_pass": 1.0,
            "pass_to_pass": 1.0,
            "tampered": 0.0,
            "unverified": 0.0,
        }
        assert len(done.chat_calls) == 4  # find, read, fix, submit
        output = sandboxed.output(task)
        assert output["submitted"] is True and task["reference"]["file"] in output["patch"]
        assert "fixed" in sandboxed.model.seen(task)  # the teacher's edit ran in the agent's working copy


@pytest.mark.bwrap
def test_an_agent_that_rewrites_the_tests_scores_0_where_a_naive_evaluator_gives_1(
    sandboxed: Run, generated: Generated
) -> None:
    task = generated.val[0]
    assert sandboxed.rewards(task) == {
        "reward": 0.0,
        "fail_to_pass": 0.0,
        "pass_to_pass": 0.0,
        "tampered": 1.0,
        "unverified": 0.0,
    }
    reward = load("reward")
    patches = reward.parse_patch(sandboxed.output(task)["patch"])
    assert {p.path for p in patches} == {"conftest.py", "toolz/tests/test_itertoolz.py"}
    # The control: its tree, the original tests restored, run as the evaluator runs them, but with its
    # conftest.py left in place: every test passes, so the guard is what scores it 0.
    with tempfile.TemporaryDirectory() as folder:
        tree = Path(folder) / task["repo"]["name"]
        reward.write_files(tree, working_files(task))
        reward.apply_patch(tree, patches)
        hidden = hidden_files(task)
        reward.write_files(tree, hidden)
        report = reward.run_hidden_tests(Path(folder), tree, reward.test_paths(hidden))
    assert report is not None and reward.score(report["outcomes"], task["reference"])["reward"] == 1.0


@pytest.mark.bwrap
def test_an_agent_that_loops_forever_is_stopped_scores_0_and_leaves_nothing_behind(
    sandboxed: Run, unsandboxed: Run, generated: Generated
) -> None:
    task = generated.val[1]
    assert sandboxed.rewards(task)["reward"] == 0.0
    assert sandboxed.output(task) == {"patch": "", "submitted": False, "turns": 4}
    seen = sandboxed.model.seen(task)
    assert seen.count("killed after 4 s") == 1 and "still looping" in seen  # cut off, and on to the next
    assert sandboxed.survivors == [] and not sandboxed.escaped
    # the control: unsandboxed, the daemon outlives its agent and the write outside lands
    assert unsandboxed.survivors and unsandboxed.escaped
    assert unsandboxed.rewards(task)["reward"] == 0.0


@pytest.mark.bwrap
def test_a_hostile_agent_in_the_sandbox_reads_neither_the_hidden_tests_nor_the_reference(
    sandboxed: Run, unsandboxed: Run, generated: Generated, canary: str
) -> None:
    task = generated.val[2]
    hidden = hidden_files(task)["toolz/tests/test_itertoolz.py"].decode()
    library = "\n".join(data.decode(errors="replace") for data in working_files(task).values())
    shown = hidden[:900]  # what the agent shows of the command's output (its head) holds this much of it
    test_line = next(line for line in shown.splitlines() if len(line) > 40 and line.strip() not in library)
    inside, outside = sandboxed.model.seen(task), unsandboxed.model.seen(task)
    assert canary not in inside and test_line not in inside
    lines = inside.splitlines()
    environ = next(i for i, line in enumerate(lines) if line.startswith("TETHER_TASK="))
    assert '"issue"' in lines[environ] and lines[environ + 1] == "0"  # its task, and no reference in it
    assert sandboxed.rewards(task)["reward"] == 0.0
    # the control: unsandboxed, the same commands read the task file (canary) and the sdist's tests
    assert canary in outside and test_line in outside


# -- as Kubernetes Jobs ---------------------------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Cluster, Path]]:
    """The test API server (tests/runner/k8s/apiserver.py), its node running each pod's command as a local
    process; the coding agent's image is the one it has."""
    node = tmp_path / "node"
    node.mkdir()
    state = Cluster(node, images={CODING_IMAGE})
    with serve_app(state.app()) as url:
        try:
            yield state, write_kubeconfig(tmp_path / "kubeconfig", url)
        finally:
            state.stop()


@pytest.mark.bwrap
def test_the_teacher_fixes_its_tasks_through_locked_down_kubernetes_jobs(
    project: Path, generated: Generated, cluster: tuple[Cluster, Path]
) -> None:
    state, kubeconfig = cluster
    (project / "data" / "k8s.jsonl").write_text("".join(json.dumps(t) + "\n" for t in generated.train))
    jobs_args = [
        *("--runner", "k8s", "--job-template", str(CODING.dir / "k8s-job.yaml.j2")),
        *("--kubeconfig", str(kubeconfig), "--agent-url", f"http://127.0.0.1:{free_port()}"),
        *("--max-jobs-per-minute", "600"),
    ]
    model = Model(load("teacher").CodingTeacher(generated.train), {})
    rollouts = rollout(project, model, generated.train, "k8s", *jobs_args)
    for task in generated.train:
        assert rollouts[task["id"]].reward_values["reward"] == 1.0  # the evaluator, under bwrap, here
    jobs = [body for kind, body in state.submitted if kind == "jobs"]
    assert len(jobs) == len(generated.train)
    for job in jobs:
        assert lockdown_gaps(job) == []
        pod = job["spec"]["template"]["spec"]
        # its writable places are two empty scratch volumes: the working copy's and /tmp
        assert {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]} == {"/work", "/tmp"}
        assert all(set(volume) == {"name", "emptyDir"} for volume in pod["volumes"])
    # each pod got its task without the reference; nothing that reached the cluster holds the hidden tests
    given = [json.loads(e["value"]) for job in jobs for e in iter_env(job) if e["name"] == "TETHER_TASK"]
    public = [{k: v for k, v in task.items() if k not in ("id", "reference")} for task in generated.train]
    assert sorted(given, key=lambda t: t["issue"]) == sorted(public, key=lambda t: t["issue"])
    shipped = json.dumps(state.submitted)
    assert not any(task["reference"]["tests"] in shipped for task in generated.train)


def test_the_image_and_the_networkpolicy_fit_the_coding_job() -> None:
    """No Docker runs here: the Dockerfile is read for what the Job relies on, and the shared NetworkPolicy
    is checked to select the coding agent's pods."""
    job = yaml.safe_load(
        (CODING.dir / "k8s-job.yaml.j2").read_text().replace("{{ command | tojson }}", '["python"]')
    )
    pod = job["spec"]["template"]["spec"]
    dockerfile = (CODING.dir / "Dockerfile").read_text()
    instructions = dict(
        line.split(" ", 1) for line in dockerfile.splitlines() if line and not line.startswith((" ", "#"))
    )
    assert instructions["USER"] == str(pod["securityContext"]["runAsUser"])
    assert instructions["WORKDIR"] == "/work"  # the agent unpacks into its cwd: the empty volume
    assert pod["containers"][0]["image"] == CODING_IMAGE and f"-t {CODING_IMAGE}" in dockerfile
    assert "uninstall --yes pip" in dockerfile and not re.search(r"apt|apk", dockerfile)
    policy = yaml.safe_load((ROOT / "examples" / "arith_agent" / "k8s-networkpolicy.yaml").read_text())
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
