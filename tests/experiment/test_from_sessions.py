"""`tether train --from-sessions RUN`: the next policy version from a deployment's recorded sessions and
their later rewards. Real `tether serve` processes (the built-in engine, tiny-random) record two
deployments' sessions in one project; training reads one deployment's, redacted, and resumes."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from tests.cli.test_serve import tether_serve
from tether.cli.main import main
from tether.learner.state import CHECKPOINT_EXTRA

SHOP = {  # session name -> (what the user writes, the reward posted later; None: none)
    "shop-1": ("What is 2+2?", {"thumbs": "up"}),
    "shop-2": ("Name a colour.", {"thumbs": "down"}),
    "shop-3": ("Say hello.", {"value": 0.5}),
    "shop-4": ("My card is secret-4242, is it valid?", {"thumbs": "up"}),  # redacted
    "shop-5": ("Count to three.", None),  # never rewarded
}
OTHER = {"other-1": ("What is 3+3?", {"thumbs": "up"}), "other-2": ("Pick a number.", {"thumbs": "down"})}


def record_sessions(project: Path, run: str, sessions: dict[str, tuple[str, dict | None]]) -> dict[str, str]:
    """Each session opened, one call made, ended, then its reward posted: their rollout ids by name."""
    keys = project / ".tether"
    ids = {}
    with tether_serve(project, "--model", "tiny-random", "--no-session", "--sessions-run", run) as served:
        deploy = {"Authorization": f"Bearer {(keys / 'deploy_key').read_text().strip()}"}
        reward = {"Authorization": f"Bearer {(keys / 'reward_key').read_text().strip()}"}
        for name, (message, later) in sessions.items():
            creds = httpx.post(f"{served.url}/sessions/open", json={"session": name}, headers=deploy).json()
            llm = openai.OpenAI(base_url=creds["base_url"], api_key=creds["api_key"], max_retries=0)
            llm.chat.completions.create(
                model="policy", messages=[{"role": "user", "content": message}], max_tokens=8
            )
            httpx.post(f"{served.url}/sessions/{name}/end", headers=deploy).raise_for_status()
            if later is not None:
                httpx.post(
                    f"{served.url}/sessions/{name}/rewards", json=later, headers=reward
                ).raise_for_status()
            ids[name] = creds["rollout_id"]
    return ids


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], dict[str, str]]:
    project = tmp_path_factory.mktemp("deployed")
    return project, record_sessions(project, "shop", SHOP), record_sessions(project, "other", OTHER)


def train(project: Path, *flags: str) -> int:
    return main(
        ["train", "--from-sessions", "shop", "--model", "tiny-random", "--project-dir", str(project)]
        + ["--redact", r"secret-\d+", "--steps", "1", *flags]
    )


def run_records(project: Path, run: str) -> list[dict]:
    lines = (project / ".tether" / "runs" / run / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def trained_sessions(project: Path, run: str) -> list[str]:
    """The sessions the run's last update trained on, as its checkpoint keeps them."""
    runs = project / ".tether" / "runs" / run / "checkpoints"
    extra = max(runs.iterdir(), key=lambda p: int(p.name[1:])) / CHECKPOINT_EXTRA
    return list(json.loads(extra.read_text())["sessions"])


def test_rl_on_one_deployments_rewarded_sessions_redacted_then_resumed(
    deployed: tuple[Path, dict[str, str], dict[str, str]],
) -> None:
    project, shop, other = deployed
    assert train(project) == 0
    run_dir = project / ".tether" / "runs" / "from-shop"
    (record,) = run_records(project, "from-shop")
    assert (record["sessions.finished"], record["sessions.unrewarded"], record["sessions.redacted"]) == (
        5,
        1,
        1,
    )
    assert record["sessions.trained"] == 3 and record["samples"] == 3 and record["train.grad_norm"] > 0
    assert sorted(trained_sessions(project, "from-shop")) == sorted(
        shop[n] for n in ("shop-1", "shop-2", "shop-3")
    )
    assert not set(trained_sessions(project, "from-shop")) & set(other.values())  # the other deployment's
    assert (run_dir / "policies" / "v1" / "adapter_config.json").exists()

    assert train(project) == 0  # more training later resumes the run: the next version
    assert [r["step"] for r in run_records(project, "from-shop")] == [1, 2]
    assert (run_dir / "policies" / "v2" / "adapter_config.json").exists()


def test_sft_imitates_the_sessions_rewarded_at_least_the_threshold(
    deployed: tuple[Path, dict[str, str], dict[str, str]],
) -> None:
    project, shop, _ = deployed
    assert train(project, "--algorithm", "sft", "--sft-min-reward", "1", "--run", "sft") == 0
    (record,) = run_records(project, "sft")
    assert record["samples"] == 1  # shop-1 only: shop-4 was rewarded too, and redacted


def test_nothing_to_train_on_and_bad_options_are_one_line(
    deployed: tuple[Path, dict[str, str], dict[str, str]],
) -> None:
    project, _, _ = deployed
    for flags, says in (
        (["--from-sessions", "nobody"], "nothing to train on"),
        (["--since", "yesterday"], "--since 'yesterday'"),
        (["--redact", "(unclosed"], "not a regular expression"),
        (["--algorithm", "opd"], "needs a rollout's group"),
    ):
        with pytest.raises(SystemExit) as stopped:
            train(project, *flags)
        assert says in str(stopped.value) and len(str(stopped.value).splitlines()) == 1
    with pytest.raises(SystemExit, match="give --agent and --tasks, or --from-sessions RUN"):
        main(["train", "--model", "tiny-random", "--project-dir", str(project)])


def test_kill_9_of_train_at_any_point_loses_no_version(
    deployed: tuple[Path, dict[str, str], dict[str, str]],
) -> None:
    """Killed at points spread over its run, then run to the end each time: every published version is
    whole, and is its checkpoint's adapter; none is skipped. A kill between the checkpoint and its copy
    leaves a version the next run publishes."""
    project, _, _ = deployed
    run_dir = project / ".tether" / "runs" / "killed"
    argv = [sys.executable, "-m", "tether.cli.main", "train", "--from-sessions", "shop", "--model"]
    argv += ["tiny-random", "--project-dir", str(project), "--steps", "1", "--run", "killed"]
    started = time.monotonic()
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    whole = time.monotonic() - started
    for fraction in (0.3, 0.6, 0.8, 0.9, 0.97):
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(whole * fraction)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert_versions_whole(run_dir)
    shutil.rmtree(run_dir / "policies" / "v1")  # what a kill between a checkpoint and its copy leaves
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    published = assert_versions_whole(run_dir)
    assert published == list(range(1, len(published) + 1)) and len(published) >= 2


def assert_versions_whole(run_dir: Path) -> list[int]:
    """The published versions, each a whole adapter equal to its checkpoint's."""
    versions = []
    for folder in sorted((run_dir / "policies").iterdir()):
        if folder.name.startswith("."):
            continue  # a copy under way when the kill came: never a vN a server would load
        checkpoint = run_dir / "checkpoints" / folder.name / "policy"
        names = sorted(p.name for p in folder.iterdir())
        assert names == sorted(p.name for p in checkpoint.iterdir()), folder
        for name in names:
            assert (folder / name).read_bytes() == (checkpoint / name).read_bytes(), folder / name
        versions.append(int(folder.name[1:]))
    return sorted(versions)
