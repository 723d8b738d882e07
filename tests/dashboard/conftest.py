"""A finished tiny-model training run (the real trainer, gateway, engine and store) served with the
dashboard on loopback, and headless Chromium driven by Playwright.

Screenshots go to `test-artifacts/dashboard/` (or `$TETHER_TEST_ARTIFACTS/dashboard`)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.helpers import serve_app
from tether.compose import create_app
from tether.dashboard import DashboardConfig
from tether.gateway import Gateway
from tether.learner.policy import TrainConfig
from tether.project import Project
from tether.runner import CallableAgent
from tether.runner.runs import start_run
from tether.store import SQLiteStore, Task
from tether.trainer.loop import Trainer, TrainerConfig

RUN = "dash-train"
WANDB_PROJECT = "tether-dashboard-test"
TASKS = [Task(id=f"t{i}", input={"question": f"Say something about {i}."}) for i in range(4)]
VAL = TASKS[:2]
ROOT = Path(__file__).resolve().parents[2]


def _store_api(base_url: str) -> str:
    return base_url.split("/rollouts/", 1)[0]


OBSERVATION_IDS = [198, 4402, 30]  # what the "tool" answered, as token ids appended to the sequence


async def chatty_tool_agent(task: dict, llm) -> str:  # noqa: ANN001
    """A chat call, a tool span of its own (sent through the store API with the rollout's token, as any
    agent's span), then a completions call whose token-id prompt extends the first call's sequence with
    the tool's output: the two calls merge into one sample with the tool's tokens masked."""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key=llm.api_key, max_retries=0) as client:
        return await _chat_tool_completion(client, task, llm)


async def _chat_tool_completion(client: openai.AsyncOpenAI, task: dict, llm) -> str:  # noqa: ANN001
    messages = [{"role": "user", "content": task["question"]}]
    ids = {"return_token_ids": True}
    first = await client.chat.completions.create(
        model=llm.model, messages=messages, max_tokens=6, extra_body=ids
    )
    answer = first.model_dump()
    sequence = answer["prompt_token_ids"] + answer["choices"][0]["token_ids"]
    rollout_id, attempt = llm.base_url.split("/rollouts/", 1)[1].split("/")[0:3:2]
    started = time.time()
    span = {
        "rollout_id": rollout_id,
        "attempt": int(attempt),
        "name": "tool:lookup",
        "start_time": started,
        "end_time": started + 0.002,
        "attributes": {"tool": "lookup", "query": task["question"]},
    }
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {llm.api_key}"}) as http:
        (
            await http.post(_store_api(llm.base_url) + "/store/spans", json={"spans": [span]})
        ).raise_for_status()
    second = await client.completions.create(
        model=llm.model, prompt=sequence + OBSERVATION_IDS, max_tokens=6, extra_body=ids
    )
    return (first.choices[0].message.content or "") + second.choices[0].text


def even_length(task: dict, output: str | None) -> float:
    """An arbitrary verdict that splits random text about in half, so groups have reward variance."""
    return float(len(output or "") % 2 == 0)


@dataclass
class TrainedProject:
    root: Path
    store: SQLiteStore
    project: Project

    @property
    def runs_dir(self) -> Path:
        return self.project.state_dir / "runs"

    @property
    def run_dir(self) -> Path:
        return self.runs_dir / RUN


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TrainedProject]:
    """`tether train`'s loop on tiny-random, 2 steps with validation, logging to W&B offline."""
    root = tmp_path_factory.mktemp("dashboard-project")
    project = Project.at(root)
    store = SQLiteStore(project.store_path)
    record = start_run(store, RUN, "train", TASKS, {"algorithm": "grpo", "model": "tiny-random"})
    config = TrainerConfig(
        model="tiny-random",
        steps=2,
        group_size=4,
        tasks_per_step=2,
        n_workers=8,
        val_every=1,
        checkpoint_every=0,
        timeout_s=60,
        policy=TrainConfig(model="tiny-random", lr=5e-3, micro_batch_tokens=4096),
        wandb_project=WANDB_PROJECT,
    )
    saved = {key: os.environ.get(key) for key in ("WANDB_MODE", "WANDB_SILENT")}
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true")
    try:
        trainer = Trainer(config, project.state_dir / "runs" / RUN, store, project.authority(), run=record)
        trainer.fit(CallableAgent(chatty_tool_agent), TASKS, VAL, even_length)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    yield TrainedProject(root, store, project)
    store.close()


@dataclass
class Dashboard:
    url: str
    admin_token: str
    viewer_token: str


@pytest.fixture(scope="session")
def dashboard(trained: TrainedProject) -> Iterator[Dashboard]:
    authority = trained.project.authority()
    gateway = Gateway(trained.store, authority)
    config = DashboardConfig(runs_dir=trained.runs_dir, tokenizer="tiny-random")
    with serve_app(create_app(gateway, config)) as url:
        yield Dashboard(url, authority.admin_token, authority.viewer_token)
    gateway.recorder.close()


# Per module: Playwright's sync API keeps an event loop running on this thread while it is open, and
# tests elsewhere call asyncio.run.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("Debian's chromium is not installed: run scripts/ensure_chromium.sh (make test does)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield chromium
        chromium.close()


# `dashboard` first: the training run behind it uses asyncio, which cannot run inside Playwright's loop.
@pytest.fixture
def page(dashboard: Dashboard, browser: Any) -> Iterator[Any]:
    yield from checked_page(browser)


def checked_page(browser: Any) -> Iterator[Any]:
    """A page in a fresh context; the test fails if the page raised a script error."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"the page raised: {errors}"


def sign_in(page: Any, dashboard: Dashboard, token: str, hash_path: str = "#/runs") -> None:
    page.goto(f"{dashboard.url}/ui/{hash_path}")
    page.fill("#token", token)
    page.click("#login button[type=submit]")


@pytest.fixture(scope="session")
def artifacts() -> Path:
    base = Path(os.environ.get("TETHER_TEST_ARTIFACTS") or ROOT / "test-artifacts")
    folder = base / "dashboard"
    folder.mkdir(parents=True, exist_ok=True)
    return folder
