"""The dashboard in a real browser (headless Chromium), over a finished tiny-model training run."""

from __future__ import annotations

import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from tests.dashboard.conftest import RUN, Dashboard, TrainedProject, sign_in
from tether.adapters import build_transitions
from tether.contracts import CallAttr, is_call_span
from tether.deploy import CanaryRule, CanaryState, PolicyArm, compare
from tether.store.records import RolloutRequest, RolloutStatus, Task
from tether.store.reward_rule import rollout_reward
from tether.trainer.metrics import MetricsLog, read_metrics

WAIT_MS = 30_000


def test_runs_page_lists_the_finished_run_and_draws_its_curve(
    page: Any, dashboard: Dashboard, trained: TrainedProject, artifacts: Path
) -> None:
    sign_in(page, dashboard, dashboard.viewer_token)
    row = page.locator(f'#runs tr[data-run="{RUN}"]')
    row.wait_for(timeout=WAIT_MS)
    steps = max(r["step"] for r in read_metrics(trained.run_dir) if r["kind"] == "train")
    assert row.locator("td").nth(4).inner_text() == str(steps)
    row.locator("input[type=checkbox]").check()
    finished = len(trained.store.list_rollouts(run=RUN, status=RolloutStatus.succeeded, limit=10_000))
    assert f"succeeded {finished}" in row.inner_text()
    records = read_metrics(trained.run_dir)
    plotted = sum(r["kind"] in ("train", "val") for r in records)
    page.wait_for_selector(f'#chart[data-points="{plotted}"] canvas', timeout=WAIT_MS)
    assert page.locator("#chart .u-legend").inner_text().count(RUN) == 2  # reward and held-out
    page.screenshot(path=str(artifacts / "runs.png"), full_page=True)


def test_rollouts_table_filters_and_pages(
    page: Any, dashboard: Dashboard, trained: TrainedProject, artifacts: Path
) -> None:
    store = trained.store
    everything = store.list_rollouts(run=RUN, limit=10_000)
    sign_in(page, dashboard, dashboard.admin_token, f"#/rollouts?run={RUN}&limit=5")
    page.wait_for_selector("#rollouts tbody tr[data-rollout]", timeout=WAIT_MS)
    assert page.inner_text("#page-info") == f"1–5 of {len(everything)}"
    first_page = page.locator("#rollouts tbody tr").evaluate_all("rows => rows.map(r => r.dataset.rollout)")
    page.click("#next")
    page.wait_for_function("document.querySelector('#page-info').textContent.startsWith('6–')")
    second_page = page.locator("#rollouts tbody tr").evaluate_all("rows => rows.map(r => r.dataset.rollout)")
    assert len(second_page) == 5 and not set(first_page) & set(second_page)
    newest_first = [r.id for r in reversed(everything)]  # the store lists oldest first
    assert first_page + second_page == newest_first[:10]

    winners = {r.id for r in everything if (rollout_reward(store, r) or 0.0) >= 1.0}
    succeeded = {r.id for r in everything if r.status == RolloutStatus.succeeded}
    expected = winners & succeeded
    page.fill("input[name=reward_min]", "1")
    page.select_option("select[name=status]", "succeeded")
    page.click("#filters button[type=submit]")
    info = f"1–{min(5, len(expected))} of {len(expected)}" if expected else "0 of 0"
    page.wait_for_function(f"document.querySelector('#page-info')?.textContent === {info!r}")
    shown = set(
        page.locator("#rollouts tbody tr[data-rollout]").evaluate_all(
            "rows => rows.map(r => r.dataset.rollout)"
        )
    )
    assert shown <= expected and len(shown) == min(5, len(expected))
    page.screenshot(path=str(artifacts / "rollouts.png"), full_page=True)


def test_rollout_page_shows_waterfall_and_tokens_with_masked_tokens(
    page: Any, dashboard: Dashboard, trained: TrainedProject, artifacts: Path
) -> None:
    store = trained.store
    rollout = next(r for r in store.list_rollouts(run=RUN, limit=10_000) if r.mode == "train")
    spans = store.query_spans(rollout_id=rollout.id)
    report = build_transitions(store, [rollout], merge=True)
    (transition,) = report.transitions  # the two calls merged into one sample
    masked = transition.loss_mask.count(0)
    assert masked > 0 and transition.merged_calls == 2

    sign_in(page, dashboard, dashboard.viewer_token, f"#/rollout/{rollout.id}")
    page.wait_for_selector("#waterfall .wf-row", timeout=WAIT_MS)
    assert page.locator("#waterfall .wf-row").count() == len(spans)
    assert page.locator("#waterfall .bar.call").count() == 2
    assert "tool:lookup" in page.inner_text("#waterfall")
    page.wait_for_selector("#call .tokens .tok", timeout=WAIT_MS)
    call = store.query_spans(rollout_id=rollout.id)[0]
    response_ids = call.attributes["choices"][0]["token_ids"]
    response_view = page.locator('#call .tokens[aria-label="response tokens"] .tok')
    assert response_view.count() == len(response_ids)
    assert page.locator('#call .tokens[aria-label="prompt tokens"] .tok.masked').count() == len(
        call.attributes["prompt_token_ids"]
    )
    assert "policy version" in page.inner_text("#call")
    page.wait_for_selector("#transitions .transition", timeout=WAIT_MS)
    sample = page.locator('#transitions .tokens[aria-label="transition response tokens"]')
    assert sample.locator(".tok.masked").count() == masked
    assert sample.locator(".tok.trained").count() == transition.trained_tokens
    assert "merged" in page.inner_text("#transitions")
    page.screenshot(path=str(artifacts / "rollout.png"), full_page=True)
    page.set_viewport_size({"width": 420, "height": 900})  # a narrow screen: one column, no sideways page
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(artifacts / "rollout-narrow.png"), full_page=True)


def test_live_run_curve_grows_while_watched(
    page: Any, dashboard: Dashboard, trained: TrainedProject, artifacts: Path
) -> None:
    log = MetricsLog(trained.runs_dir / "live-run")
    log.write({"kind": "val", "step": 0, "val_score": 0.25})
    log.write({"kind": "train", "step": 1, "reward_mean": 0.1, "reward_std": 0.2})
    try:
        finished = sum(r["kind"] in ("train", "val") for r in read_metrics(trained.run_dir))
        sign_in(page, dashboard, dashboard.viewer_token)
        page.locator(f'#runs tr[data-run="{RUN}"] input[type=checkbox]').check()  # overlaid
        page.locator('#runs tr[data-run="live-run"] input[type=checkbox]').check()
        page.wait_for_selector(f'#chart[data-points="{finished + 2}"]', timeout=WAIT_MS)
        assert "live" in page.inner_text('#runs tr[data-run="live-run"]')
        for step in range(2, 5):
            log.write({"kind": "train", "step": step, "reward_mean": 0.1 * step, "reward_std": 0.2})
            page.wait_for_selector(f'#chart[data-points="{finished + step + 1}"]', timeout=WAIT_MS)
        page.screenshot(path=str(artifacts / "live.png"), full_page=True)
    finally:
        log.close()


def test_curriculum_pools_are_charted_when_the_train_records_carry_them(
    page: Any, dashboard: Dashboard, trained: TrainedProject, artifacts: Path
) -> None:
    sign_in(page, dashboard, dashboard.viewer_token)
    page.wait_for_selector("#chart canvas", timeout=WAIT_MS)
    assert page.locator("#pools").is_hidden()  # no plotted run has a curriculum: no pool chart
    folder = trained.runs_dir / "curriculum-run"
    log = MetricsLog(folder)
    pools = [(6, 0, 0, 2), (5, 1, 0, 3), (3, 2, 1, 2)]  # active, retired, parked, mixed at steps 1..3
    for step, sizes in enumerate(pools, start=1):
        named = dict(zip(("active", "retired", "parked", "mixed"), sizes, strict=True))
        log.write(
            {"kind": "train", "step": step, "reward_mean": 0.5}
            | {f"curriculum.{k}": v for k, v in named.items()}
        )
    log.close()
    try:
        viewer = {"Authorization": f"Bearer {dashboard.viewer_token}"}
        answer = httpx.get(f"{dashboard.url}/ui/api/runs/curriculum-run/metrics", headers=viewer).json()
        assert [r["curriculum.retired"] for r in answer["records"]] == [0, 1, 2]
        page.reload()
        page.locator('#runs tr[data-run="curriculum-run"] input[type=checkbox]').check()
        page.wait_for_selector('#pools-chart[data-points="12"] canvas', timeout=WAIT_MS)
        legend = page.locator("#pools-chart .u-legend").inner_text()
        assert all(f"curriculum-run {pool}" in legend for pool in ("active", "retired", "parked", "mixed"))
        assert page.locator("#pools").is_visible()
        page.screenshot(path=str(artifacts / "curriculum-pools.png"), full_page=True)
    finally:
        shutil.rmtree(folder)  # the other tests' runs page lists only their runs


def test_rl_signal_is_charted_entropy_and_the_share_of_groups_with_signal(
    page: Any, dashboard: Dashboard, trained: TrainedProject, artifacts: Path
) -> None:
    folder = trained.runs_dir / "signal-run"
    log = MetricsLog(folder)
    log.write({"kind": "train", "step": 1, "phase": "sft", "reward_mean": 0.0, "train.entropy": 2.0})
    for step, (used, groups, entropy) in enumerate([(1, 4, 1.5), (3, 8, 1.25), (2, 2, 1.0)], start=2):
        log.write(
            {"kind": "train", "step": step, "reward_mean": 0.5, "groups_used": used, "groups": groups}
            | {"train.entropy": entropy}
        )
    log.close()
    try:
        sign_in(page, dashboard, dashboard.viewer_token)
        page.wait_for_selector("#chart canvas", timeout=WAIT_MS)
        page.locator('#runs tr[data-run="signal-run"] input[type=checkbox]').check()
        page.wait_for_selector('#signal-chart[data-points="6"] canvas', timeout=WAIT_MS)  # SFT's left out
        legend = page.locator("#signal-chart .u-legend").inner_text()
        assert "signal-run entropy" in legend and "signal-run groups with signal" in legend
        shares = page.evaluate(
            "() => activeCurves.runs.get('signal-run').signal['groups with signal'].map((r) => r[1])"
        )
        assert shares == [0.25, 0.375, 1.0]
        assert page.locator("#signal").is_visible()
        page.screenshot(path=str(artifacts / "rl-signal.png"), full_page=True)
    finally:
        shutil.rmtree(folder)


def test_each_policy_is_charted_with_its_version_when_the_run_trains_several(
    page: Any, dashboard: Dashboard, trained: TrainedProject, artifacts: Path
) -> None:
    assert any("train.loss" in r for r in read_metrics(trained.run_dir))  # one policy: its loss unnamed
    folder = trained.runs_dir / "policies-run"
    log = MetricsLog(folder)
    for step, versions in enumerate([(1, 1), (2, 1), (3, 2)], start=1):  # writer's, rewriter's
        record: dict[str, Any] = {"kind": "train", "step": step, "reward_mean": 0.5, "policy_version": step}
        for name, version in zip(("writer", "rewriter"), versions, strict=True):
            record |= {f"train.{name}.loss": 0.1 * step + 0.05 * version, f"train.{name}.grad_norm": 2.0}
            record |= {f"samples.{name}": 8, f"policy_version.{name}": version}
        log.write(record | {"policy_version_after": step + 1})
    log.close()
    try:
        sign_in(page, dashboard, dashboard.viewer_token)
        page.locator(f'#runs tr[data-run="{RUN}"] input[type=checkbox]').check()  # one policy: no series
        page.locator('#runs tr[data-run="policies-run"] input[type=checkbox]').check()
        page.wait_for_selector('#policies-chart[data-points="6"] canvas', timeout=WAIT_MS)
        assert page.locator("#policies").is_visible()
        labels = page.locator("#policies-chart .u-legend .u-series th").all_inner_texts()
        assert [label.strip() for label in labels] == [
            "step",
            "policies-run writer (v3)",
            "policies-run rewriter (v2)",
        ]
        page.screenshot(path=str(artifacts / "policies.png"), full_page=True)
        # Ticked again while an earlier refresh still waits on the server: each record is added once.
        overlapping = f"""() => activeCurves.show([{RUN!r}]).then(() => Promise.all([
            activeCurves.show([{RUN!r}, 'policies-run']), activeCurves.show([{RUN!r}, 'policies-run'])
        ])).then(() => activeCurves.runs.get('policies-run').policies.writer.length)"""
        assert page.evaluate(overlapping) == 3
        assert page.locator("#policies-chart").get_attribute("data-points") == "6"
        page.locator('#runs tr[data-run="policies-run"] input[type=checkbox]').uncheck()
        page.wait_for_selector('#policies-chart[data-points="0"]', state="attached", timeout=WAIT_MS)
        assert page.locator("#chart canvas").count() == 1 and page.locator("#policies").is_hidden()
    finally:
        shutil.rmtree(folder)  # the other tests' runs page lists only their runs


def test_each_model_call_shows_the_policy_that_generated_it(
    page: Any, dashboard: Dashboard, trained: TrainedProject
) -> None:
    """A rollout of two policies: its calls, as the trained run's gateway recorded them, answered by the
    upstreams `writer` and `rewriter` (the policies of `tether train --policy writer=... --policy
    rewriter=...`)."""
    store = trained.store
    source = next(r for r in store.list_rollouts(run=RUN, limit=10_000) if r.mode == "train")
    calls = [s for s in store.query_spans(rollout_id=source.id) if is_call_span(s.name)]
    (rollout,) = store.enqueue([RolloutRequest(task=Task(id="two", input={}), run="two-policies")])
    claim = store.claim("test-worker", run="two-policies")
    assert claim is not None and claim.rollout.id == rollout.id
    policies = {"writer": 4, "rewriter": 7}  # each policy's version
    spans = [
        span.model_copy(
            update={
                "rollout_id": rollout.id,
                "attempt": claim.attempt.number,
                "span_id": f"{name}-call",
                "parent_id": None,
                "seq": None,
                "attributes": span.attributes | {CallAttr.UPSTREAM: name, CallAttr.POLICY_VERSION: version},
            }
        )
        for span, (name, version) in zip(calls, policies.items(), strict=True)
    ]
    store.add_spans(spans)
    store.update_status(rollout.id, RolloutStatus.succeeded, attempt=claim.attempt.number)

    viewer = {"Authorization": f"Bearer {dashboard.viewer_token}"}
    base = f"{dashboard.url}/ui/api/rollouts/{rollout.id}"
    rows = httpx.get(base, headers=viewer).json()["spans"]
    assert {row["span_id"]: row["summary"]["policy"] for row in rows} == {
        "writer-call": "writer",
        "rewriter-call": "rewriter",
    }
    for name, version in policies.items():
        call = httpx.get(f"{base}/calls/{name}-call", headers=viewer).json()
        assert (call["policy"], call["policy_version"]) == (name, version)

    sign_in(page, dashboard, dashboard.viewer_token, f"#/rollout/{rollout.id}")
    for name, version in policies.items():
        row = page.locator(f'.wf-row[data-span="{name}-call"]')
        row.wait_for(timeout=WAIT_MS)
        assert row.locator(".label .muted").inner_text().endswith(f" · {name}")
        row.click()
        page.wait_for_selector(f"#call h2:has-text('{name}-call')", timeout=WAIT_MS)
        facts = page.locator("#call dl.facts")
        assert facts.locator("dt:text-is('policy') + dd").inner_text() == name
        assert facts.locator("dt:text-is('policy version') + dd").inner_text() == str(version)


def test_invalid_token_gets_the_login_screen_not_data(
    page: Any, dashboard: Dashboard, trained: TrainedProject
) -> None:
    rollout = trained.store.list_rollouts(run=RUN, limit=1)[0]
    sign_in(page, dashboard, "tview-not-a-real-token", f"#/rollout/{rollout.id}")
    page.wait_for_selector("#login-error:not(:empty)", timeout=WAIT_MS)
    assert page.locator("#login-screen").is_visible()
    assert not page.locator("#view").is_visible()
    assert rollout.id not in page.content()
    assert page.evaluate("sessionStorage.getItem('tether.token')") is None
    rollout_token = trained.project.authority().rollout_token(rollout.id, 1)
    for token in ("nope", rollout_token):
        answer = httpx.get(
            f"{dashboard.url}/ui/api/rollouts/{rollout.id}", headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 401
    viewer = {"Authorization": f"Bearer {dashboard.viewer_token}"}
    assert httpx.get(f"{dashboard.url}/ui/api/rollouts/{rollout.id}", headers=viewer).status_code == 200
    # the viewer token reads the dashboard only: the store API refuses it
    assert httpx.get(f"{dashboard.url}/store/runs", headers=viewer).status_code == 401


def test_canaries_page_lists_each_decision_with_its_interval(
    page: Any, dashboard: Dashboard, trained: TrainedProject, artifacts: Path
) -> None:
    """Decisions as `tether.deploy.CanaryController` records them (one resource version each)."""
    state = CanaryState(PolicyArm(0), PolicyArm(1, "/p/policies/v1", 1.0), seen=1)
    base = {"rule": asdict(CanaryRule()), "time": 1796600000.0}
    trained.store.put_resource(
        "canary:shop",
        "canary",
        {
            **base,
            "event": "started",
            "reason": "v1 serves 10% of new sessions",
            "comparison": None,
            "state": asdict(state),
        },
    )
    comparison = compare([0.0, 1.0, 0.0, 0.0] * 10, [1.0, 1.0, 0.0, 1.0] * 10)
    state = CanaryState(PolicyArm(1, "/p/policies/v1"), None, seen=1)
    trained.store.put_resource(
        "canary:shop",
        "canary",
        {
            **base,
            "event": "promoted",
            "reason": "v1: above -0.000",
            "comparison": comparison.as_dict(),
            "state": asdict(state),
        },
    )
    sign_in(page, dashboard, dashboard.viewer_token, "#/canaries")
    page.wait_for_selector("table.canary-decisions tbody tr", timeout=WAIT_MS)
    rows = page.locator("table.canary-decisions tbody tr")
    assert rows.count() == 2
    newest = rows.nth(0).inner_text()
    assert "promoted" in newest and "40 / 40" in newest and "0.250 / 0.750" in newest
    assert f"{comparison.low:.3f} to {comparison.high:.3f}" in newest
    assert "started" in rows.nth(1).inner_text()
    assert "incumbent v1 (/p/policies/v1); canary –" in page.locator("section.card p").first.inner_text()
    page.screenshot(path=str(artifacts / "canaries.png"), full_page=True)
