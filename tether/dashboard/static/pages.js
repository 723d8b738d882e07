// The runs page (with curves, two runs overlaid by ticking them), the rollouts table (filtered and paged
// on the server) and the prompt-search candidates.
"use strict";

const pages = {};
let activeCurves = null;

function stopCurves() {
  if (activeCurves) activeCurves.stop();
  activeCurves = null;
}

pages.runs = async function (view) {
  const runs = await api.get("/runs");
  const chart = el("div", { id: "chart", class: "chart", "data-points": "0" });
  const poolsChart = el("div", { id: "pools-chart", class: "chart", "data-points": "0" });
  const policiesChart = el("div", { id: "policies-chart", class: "chart", "data-points": "0" });
  const signalChart = el("div", { id: "signal-chart", class: "chart", "data-points": "0" });
  const curves = new RunCurves(chart, poolsChart, policiesChart, signalChart);
  activeCurves = curves;
  const withMetrics = runs.filter((run) => run.has_metrics);
  const selected = new Set(withMetrics.slice(-1).map((run) => run.name));
  const refresh = () => {
    curves.show([...selected]);
  };
  const rows = runs.map((run) =>
    el(
      "tr",
      { dataset: { run: run.name } },
      el(
        "td",
        {},
        el("input", {
          type: "checkbox",
          "aria-label": `plot ${run.name}`,
          checked: selected.has(run.name),
          disabled: !run.has_metrics,
          onchange: (event) => {
            if (event.target.checked) selected.add(run.name);
            else selected.delete(run.name);
            refresh();
          },
        }),
      ),
      el("td", {}, el("a", { href: `#/rollouts?run=${encodeURIComponent(run.name)}` }, run.name)),
      el("td", {}, run.command || "–"),
      el("td", {}, el("span", { class: run.live ? "badge live" : "badge" }, run.live ? "live" : "idle")),
      el("td", { class: "num" }, fmt(run.steps)),
      el("td", { class: "num" }, fmt(run.reward)),
      el("td", { class: "num" }, fmt(run.val_score)),
      el("td", { class: "counts" }, statusCounts(run.rollouts)),
    ),
  );
  view.replaceChildren(
    el("h1", {}, "Runs"),
    el("section", { class: "card" }, el("h2", {}, "Reward and held-out accuracy"), chart),
    el("section", { class: "card", id: "pools", hidden: true }, el("h2", {}, "Curriculum pools (tasks)"), poolsChart),
    el("section", { class: "card", id: "policies", hidden: true }, el("h2", {}, "Policies (loss; latest version)"), policiesChart),
    el("section", { class: "card", id: "signal", hidden: true }, el("h2", {}, "RL signal (entropy; share of groups whose rewards vary)"), signalChart),
    el(
      "div",
      { class: "scroll" },
      el(
        "table",
        { id: "runs" },
        el("thead", {}, el("tr", {}, ["plot", "run", "command", "state", "steps", "reward", "held-out", "rollouts"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 8 }, "No runs yet."))),
      ),
    ),
  );
  refresh();
  performance.mark("tether:runs-rendered");
};

function statusCounts(counts) {
  return Object.entries(counts)
    .filter(([, count]) => count)
    .map(([status, count]) => el("span", { class: `status ${status}` }, `${status} ${count}`));
}

const ROLLOUT_FILTERS = ["run", "status", "task", "agent", "worker", "reward_min", "reward_max"];
const PAGE_SIZE = 50;

pages.rollouts = async function (view, params) {
  const query = Object.fromEntries(ROLLOUT_FILTERS.map((key) => [key, params.get(key) || ""]));
  const offset = Number(params.get("offset") || 0);
  const size = Math.min(Math.max(Number(params.get("limit") || PAGE_SIZE), 1), 500);
  const [runs, page] = await Promise.all([
    api.get("/runs"),
    api.get("/rollouts", { ...query, offset, limit: size }),
  ]);
  const form = filterForm(query, runs.map((run) => run.name));
  const go = (newOffset) => {
    const next = new URLSearchParams();
    for (const [key, value] of Object.entries(query)) if (value) next.set(key, value);
    if (newOffset) next.set("offset", newOffset);
    if (size !== PAGE_SIZE) next.set("limit", size);
    location.hash = "#/rollouts?" + next.toString();
  };
  const last = Math.min(offset + page.rows.length, page.total);
  const totalText = page.total_capped ? `${page.total.toLocaleString()}+` : page.total.toLocaleString();
  const pager = el(
    "div",
    { class: "pager" },
    el("button", { id: "prev", type: "button", disabled: offset === 0, onclick: () => go(Math.max(0, offset - size)) }, "← Previous"),
    el("span", { id: "page-info" }, page.rows.length ? `${offset + 1}–${last} of ${totalText}` : `0 of ${totalText}`),
    el("button", { id: "next", type: "button", disabled: offset + size >= page.total && !page.total_capped, onclick: () => go(offset + size) }, "Next →"),
  );
  const rows = page.rows.map((row) =>
    el(
      "tr",
      { dataset: { rollout: row.id } },
      el("td", {}, el("a", { href: `#/rollout/${row.id}` }, row.id)),
      el("td", {}, row.run || "–"),
      el("td", {}, row.task_id),
      el("td", {}, row.mode),
      el("td", {}, el("span", { class: `status ${row.status}` }, row.status)),
      el("td", { class: "num" }, fmt(row.reward)),
      el("td", { class: "num" }, row.attempt_count),
      el("td", {}, row.worker || "–"),
      el("td", {}, when(row.created_at)),
      el("td", { class: "error-cell" }, row.error || ""),
    ),
  );
  view.replaceChildren(
    el("h1", {}, "Rollouts"),
    form,
    pager,
    el(
      "div",
      { class: "scroll" },
      el(
        "table",
        { id: "rollouts" },
        el("thead", {}, el("tr", {}, ["rollout", "run", "task", "mode", "status", "reward", "attempts", "worker", "created", "error"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows.length ? rows : el("tr", {}, el("td", { colspan: 10 }, "No rollouts match."))),
      ),
    ),
  );
  performance.mark("tether:rollouts-rendered");

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    for (const key of ROLLOUT_FILTERS) query[key] = form.elements[key].value.trim();
    go(0);
  });
};

function filterForm(query, runNames) {
  const statuses = ["", "queued", "running", "succeeded", "failed", "timed_out", "cancelled"];
  const field = (name, label, input) => el("label", {}, el("span", {}, label), input);
  return el(
    "form",
    { id: "filters", class: "filters" },
    field("run", "run", el("select", { name: "run" }, ["", ...runNames].map((name) => el("option", { value: name, selected: name === query.run }, name || "any")))),
    field("status", "status", el("select", { name: "status" }, statuses.map((s) => el("option", { value: s, selected: s === query.status }, s || "any")))),
    field("task", "task", el("input", { name: "task", value: query.task, placeholder: "id or text" })),
    field("agent", "agent", el("input", { name: "agent", value: query.agent })),
    field("worker", "node / worker", el("input", { name: "worker", value: query.worker })),
    field("reward_min", "reward ≥", el("input", { name: "reward_min", value: query.reward_min, type: "number", step: "any" })),
    field("reward_max", "reward ≤", el("input", { name: "reward_max", value: query.reward_max, type: "number", step: "any" })),
    el("button", { type: "submit" }, "Filter"),
  );
}

pages.prompts = async function (view) {
  const searches = await api.get("/prompts");
  const sections = searches.map((search) =>
    el(
      "section",
      { class: "card" },
      el("h2", {}, search.prompt),
      el(
        "div",
        { class: "scroll" },
        el(
          "table",
          { class: "candidates" },
          el("thead", {}, el("tr", {}, ["version", "candidate", "round", "origin", "parents", "score", "status", "prompt", "critique"].map((h) => el("th", {}, h)))),
          el(
            "tbody",
            {},
            search.candidates.map((c) =>
              el(
                "tr",
                { class: c.best ? "best" : null },
                el("td", { class: "num" }, c.version),
                el("td", {}, c.candidate || "–"),
                el("td", { class: "num" }, fmt(c.round)),
                el("td", {}, c.origin || "–"),
                el("td", {}, (c.parents || []).join(", ") || "–"),
                el("td", { class: "num" }, fmt(c.score)),
                el("td", {}, c.reason ? `${c.status}: ${c.reason}` : c.status || "–"),
                el("td", {}, el("pre", { class: "text" }, c.text || "")),
                el("td", {}, el("pre", { class: "text" }, c.critique || "–")),
              ),
            ),
          ),
        ),
      ),
    ),
  );
  view.replaceChildren(el("h1", {}, "Prompt search"), ...(sections.length ? sections : [el("p", { class: "muted" }, "No prompt search has run in this store.")]));
};

function armText(arm) {
  return arm ? `v${arm.version}${arm.path ? ` (${arm.path})` : " (base model)"}` : "–";
}

function intervalText(c) {
  if (!c || c.low === null || c.low === undefined) return "–";
  return `${fmt(c.low)} to ${fmt(c.high)}`;
}

pages.canaries = async function (view) {
  const deployments = await api.get("/canaries");
  const sections = deployments.map((d) =>
    el(
      "section",
      { class: "card" },
      el("h2", {}, `Deployment ${d.deployment}`),
      el("p", {}, `Serving: incumbent ${armText(d.incumbent)}; canary ${armText(d.canary)}`),
      el(
        "div",
        { class: "scroll" },
        el(
          "table",
          { class: "canary-decisions" },
          el("thead", {}, el("tr", {}, ["#", "time", "decision", "incumbent", "canary", "sessions (inc. / can.)", "mean reward (inc. / can.)", "canary − incumbent, 95%", "why"].map((h) => el("th", {}, h)))),
          el(
            "tbody",
            {},
            d.decisions.map((x) =>
              el(
                "tr",
                { class: x.event === "promoted" ? "best" : null },
                el("td", { class: "num" }, x.version),
                el("td", {}, x.time ? new Date(x.time * 1000).toLocaleString() : "–"),
                el("td", {}, x.event || "–"),
                el("td", { class: "num" }, x.incumbent === undefined || x.incumbent === null ? "–" : `v${x.incumbent}`),
                el("td", { class: "num" }, x.canary === undefined || x.canary === null ? "–" : `v${x.canary}`),
                el("td", { class: "num" }, x.comparison ? `${x.comparison.incumbent} / ${x.comparison.canary}` : "–"),
                el("td", { class: "num" }, x.comparison ? `${fmt(x.comparison.incumbent_mean)} / ${fmt(x.comparison.canary_mean)}` : "–"),
                el("td", { class: "num" }, intervalText(x.comparison)),
                el("td", {}, x.reason || "–"),
              ),
            ),
          ),
        ),
      ),
    ),
  );
  view.replaceChildren(el("h1", {}, "Canaries"), ...(sections.length ? sections : [el("p", { class: "muted" }, "No canary has run in this store (tether serve --canary SHARE --watch DIR).")]));
};
