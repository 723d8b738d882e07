"""The dashboard's routes: the page and its assets under `/ui` (no data, no token), and its JSON API
under `/ui/api` (the admin or the viewer token, as a bearer header). Every route only reads.

No `from __future__ import annotations` here: FastAPI reads the routes' annotations at runtime."""

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from tether.dashboard.canaries import canary_decisions
from tether.dashboard.prompts import prompt_searches
from tether.dashboard.rollouts import call_detail, judge_detail, rollout_detail, transitions_view
from tether.dashboard.runs import metrics_path, read_metrics_from, run_summaries
from tether.dashboard.tokens import TokenDecoder
from tether.gateway.errors import unauthorized
from tether.store.auth import TokenAuthority, bearer_token
from tether.store.base import Store
from tether.store.records import RolloutQuery, RolloutStatus

STATIC = Path(__file__).parent / "static"
PAGE_LIMIT = 500


@dataclass
class DashboardConfig:
    """Where run folders are (`.tether/runs`: their metrics are the curves) and what decodes token ids:
    a tokenizer already loaded (the engine's), else a model's (a catalogue name or a local folder, loaded
    in the background), else none (ids are shown)."""

    runs_dir: Path | None = None
    tokenizer: str | None = None
    loaded_tokenizer: Any = None


def install_dashboard(app: FastAPI, store: Store, auth: TokenAuthority, config: DashboardConfig) -> None:
    decoder = TokenDecoder(config.tokenizer, config.loaded_tokenizer)
    if config.loaded_tokenizer is None and config.tokenizer is not None:
        # Loading transformers takes seconds: not on the first page view.
        threading.Thread(target=lambda: decoder.available, name="tether-tokenizer", daemon=True).start()
    app.include_router(_api_router(store, auth, decoder, config.runs_dir))
    app.mount("/ui/static", StaticFiles(directory=STATIC), name="dashboard-static")

    @app.get("/ui", include_in_schema=False)
    @app.get("/ui/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-cache"})


def _api_router(
    store: Store, auth: TokenAuthority, decoder: TokenDecoder, runs_dir: Path | None
) -> APIRouter:
    def reader(request: Request) -> str:
        token = bearer_token(request.headers.get("authorization"))
        if not auth.can_read(token):
            raise unauthorized("the dashboard needs the admin or the viewer token")
        return "admin" if auth.is_admin(token) else "viewer"

    router = APIRouter(prefix="/ui/api", include_in_schema=False)
    Role = Annotated[str, Depends(reader)]

    @router.get("/whoami")
    def whoami(role: Role) -> dict[str, str]:
        return {"role": role}

    @router.get("/runs")
    def runs(_: Role) -> list[dict[str, Any]]:
        return run_summaries(store, runs_dir)

    @router.get("/runs/{run}/metrics")
    def metrics(run: str, _: Role, offset: Annotated[int, Query(ge=0)] = 0) -> dict[str, Any]:
        chunk = read_metrics_from(metrics_path(runs_dir, run), offset)
        return {"records": chunk.records, "offset": chunk.offset}

    @router.get("/rollouts")
    def rollouts(
        _: Role,
        run: str | None = None,
        status: RolloutStatus | None = None,
        task: str | None = None,
        agent: str | None = None,
        worker: str | None = None,
        mode: str | None = None,
        reward_min: float | None = None,
        reward_max: float | None = None,
        limit: Annotated[int, Query(ge=1, le=PAGE_LIMIT)] = 50,
        offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    ) -> dict[str, Any]:
        query = RolloutQuery(
            run=run or None,
            status=status,
            task=task or None,
            agent=agent or None,
            worker=worker or None,
            mode=mode or None,
            reward_min=reward_min,
            reward_max=reward_max,
            limit=limit,
            offset=offset,
        )
        page = store.query_rollouts(query)
        return {
            "total": page.total,
            "total_capped": page.total_capped,
            "rows": [
                _rollout_row(row.rollout.model_dump(mode="json"), row.reward, row.worker) for row in page.rows
            ],
        }

    @router.get("/rollouts/{rollout_id}")
    def rollout(rollout_id: str, _: Role) -> dict[str, Any]:
        return rollout_detail(store, rollout_id)

    @router.get("/rollouts/{rollout_id}/calls/{span_id}")
    def call(rollout_id: str, span_id: str, _: Role) -> dict[str, Any]:
        return call_detail(store, decoder, rollout_id, span_id)

    @router.get("/rollouts/{rollout_id}/judge/{span_id}")
    def judge(rollout_id: str, span_id: str, _: Role) -> dict[str, Any]:
        return judge_detail(store, rollout_id, span_id)

    @router.get("/rollouts/{rollout_id}/transitions")
    def transitions(rollout_id: str, _: Role) -> dict[str, Any]:
        return transitions_view(store, decoder, rollout_id)

    @router.get("/prompts")
    def prompts(_: Role) -> list[dict[str, Any]]:
        return prompt_searches(store)

    @router.get("/canaries")
    def canaries(_: Role) -> list[dict[str, Any]]:
        return canary_decisions(store)

    return router


def _rollout_row(rollout: dict[str, Any], reward: float | None, worker: str | None) -> dict[str, Any]:
    keys = ("id", "run", "task_id", "mode", "status", "attempt_count", "created_at", "ended_at", "sample")
    row = {key: rollout[key] for key in keys}
    row.update(reward=reward, worker=worker, error=(rollout["error"] or "")[:200] or None)
    return row
