// One rollout: summary, attempts, rewards, output and error; the trace waterfall of all its spans; the
// selected model call (messages, response, token view) or judge's call (what it was shown, its reply and
// the score it gave); and its transitions. Every string from the store goes in as text (el), never as
// markup: it quotes what agents wrote.
"use strict";

pages.rollout = async function (view, params, rolloutId) {
  const detail = await api.get(`/rollouts/${encodeURIComponent(rolloutId)}`);
  const r = detail.rollout;
  const callPanel = el("section", { id: "call", class: "card" }, el("p", { class: "muted" }, "Select a model call or a judge's call in the waterfall."));
  const transitionsPanel = el("section", { id: "transitions", class: "card" }, el("h2", {}, "Transitions"), el("p", { class: "muted" }, "Loading…"));
  view.replaceChildren(
    el("h1", {}, "Rollout ", el("code", {}, r.id)),
    el(
      "section",
      { class: "card grid" },
      facts([
        ["run", r.run],
        ["task", r.task_id],
        ["mode", r.mode],
        ["status", el("span", { class: `status ${r.status}` }, r.status)],
        ["reward", fmt(detail.reward)],
        ["group", r.group_id],
        ["attempts", `${r.attempt_count} of ${r.max_attempts}`],
        ["created", when(r.created_at)],
      ]),
      // The whole task, its `reference` (the evaluator's only, never the agent's) included: for the operator.
      el("div", {}, el("h3", {}, "Task"), el("pre", { class: "text" }, JSON.stringify(r.input, null, 2)), el("h3", {}, "Output"), el("pre", { class: "text" }, r.output || "–"), r.error ? el("h3", {}, "Error") : null, r.error ? el("pre", { class: "text error" }, r.error) : null),
    ),
    el("section", { class: "card" }, el("h2", {}, "Attempts"), attemptsTable(detail.attempts)),
    el("section", { class: "card" }, el("h2", {}, "Rewards"), rewardsTable(detail.rewards)),
    el("section", { class: "card" }, el("h2", {}, `Trace (${detail.spans.length} spans)`), waterfall(detail.spans, (span) => (span.judge ? showJudge : showCall)(callPanel, r.id, span))),
    callPanel,
    transitionsPanel,
  );
  performance.mark("tether:rollout-rendered");
  const firstCall = detail.spans.find((span) => span.call);
  const firstJudge = detail.spans.find((span) => span.judge);
  if (firstCall) showCall(callPanel, r.id, firstCall);
  else if (firstJudge) showJudge(callPanel, r.id, firstJudge);
  api.get(`/rollouts/${encodeURIComponent(r.id)}/transitions`).then((t) => showTransitions(transitionsPanel, t));
};

// A table in a box that scrolls sideways on a narrow screen, instead of the page.
function scrolling(tag, attrs, ...children) {
  return el("div", { class: "scroll" }, el(tag, attrs, ...children));
}

function facts(pairs) {
  return el("dl", { class: "facts" }, pairs.flatMap(([key, value]) => [el("dt", {}, key), el("dd", {}, value ?? "–")]));
}

function attemptsTable(attempts) {
  if (!attempts.length) return el("p", { class: "muted" }, "Not started.");
  return scrolling(
    "table",
    {},
    el("thead", {}, el("tr", {}, ["#", "worker", "status", "started", "ended", "error"].map((h) => el("th", {}, h)))),
    el("tbody", {}, attempts.map((a) => el("tr", {}, el("td", {}, a.number), el("td", {}, a.worker_id), el("td", {}, el("span", { class: `status ${a.status}` }, a.status)), el("td", {}, when(a.started_at)), el("td", {}, when(a.ended_at)), el("td", {}, a.error || "")))),
  );
}

function rewardsTable(rewards) {
  if (!rewards.length) return el("p", { class: "muted" }, "No rewards recorded.");
  return scrolling(
    "table",
    {},
    el("thead", {}, el("tr", {}, ["name", "value", "source", "primary", "attempt", "linked span"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rewards.map((w) => el("tr", {}, el("td", {}, w.name), el("td", { class: "num" }, fmt(w.value)), el("td", {}, w.source === "air" ? "AIR (automatic)" : w.source), el("td", {}, w.primary ? "yes" : "no"), el("td", {}, fmt(w.attempt)), el("td", {}, w.span_id || "–")))),
  );
}

function waterfall(spans, onSelect) {
  if (!spans.length) return el("p", { class: "muted" }, "No spans.");
  const start = Math.min(...spans.map((s) => s.start));
  const end = Math.max(...spans.map((s) => s.end || s.start));
  const total = Math.max(end - start, 1e-6);
  const depth = spanDepths(spans);
  const rows = spans.map((span) => {
    const left = ((span.start - start) / total) * 100;
    const width = Math.max((((span.end || span.start) - span.start) / total) * 100, 0.4);
    const ms = span.end ? ((span.end - span.start) * 1000).toFixed(1) + " ms" : "open";
    const classes = ["bar", span.call ? "call" : span.judge ? "judge" : "other", span.status];
    const selectable = span.call || span.judge;
    const policy = span.call && span.summary.policy ? ` · ${span.summary.policy}` : "";
    const label = el("div", { class: "label", style: `padding-left:${depth.get(span.span_id) * 0.8}rem` }, span.name, el("span", { class: "muted" }, ` ${span.origin}${policy}`));
    const row = el(
      "div",
      { class: "wf-row", dataset: { span: span.span_id }, role: selectable ? "button" : null, tabindex: selectable ? "0" : null },
      label,
      el("div", { class: "track" }, el("div", { class: classes.join(" "), style: `left:${left}%;width:${width}%`, title: `${span.name} · ${ms} · ${span.status}` })),
      el("div", { class: "ms num" }, ms),
    );
    if (selectable) {
      row.addEventListener("click", () => onSelect(span));
      row.addEventListener("keydown", (event) => event.key === "Enter" && onSelect(span));
    }
    return row;
  });
  return el("div", { id: "waterfall", class: "waterfall" }, rows);
}

function spanDepths(spans) {
  const parents = new Map(spans.map((s) => [s.span_id, s.parent_id]));
  const depth = new Map();
  for (const span of spans) {
    let d = 0;
    let parent = span.parent_id;
    const seen = new Set();
    while (parent && parents.has(parent) && !seen.has(parent) && d < 20) {
      seen.add(parent);
      parent = parents.get(parent);
      d += 1;
    }
    depth.set(span.span_id, d);
  }
  return depth;
}

// Marks the span's row selected and the panel as showing it; false once another span was selected since
// (a slower answer for an earlier click must not replace the later one's).
function select(panel, span) {
  document.querySelectorAll(".wf-row.selected").forEach((row) => row.classList.remove("selected"));
  const row = document.querySelector(`.wf-row[data-span="${CSS.escape(span.span_id)}"]`);
  if (row) row.classList.add("selected");
  panel.dataset.showing = span.span_id;
  panel.replaceChildren(el("p", { class: "muted" }, "Loading call…"));
  return () => panel.dataset.showing === span.span_id;
}

async function showCall(panel, rolloutId, span) {
  const current = select(panel, span);
  const call = await api.get(`/rollouts/${encodeURIComponent(rolloutId)}/calls/${encodeURIComponent(span.span_id)}`);
  if (!current()) return;
  const request = call.request || {};
  const messages = request.messages || request.input || request.prompt;
  panel.replaceChildren(
    el("h2", {}, "Model call ", el("code", {}, call.span_id)),
    facts([
      ["model", call.model],
      ["agent", call.agent],
      ["policy", call.policy],
      ["policy version", fmt(call.policy_version)],
      ["latency", call.latency_ms === null ? "–" : `${fmt(call.latency_ms, 1)} ms`],
      ["training", call.outcome + (call.break_reason ? ` (chain broke here: ${call.break_reason})` : "")],
    ]),
    el("div", { class: "two" }, el("div", {}, el("h3", {}, "Messages as the agent sent them"), el("pre", { class: "text" }, pretty(messages ?? request))), el("div", {}, el("h3", {}, "Response"), el("pre", { class: "text" }, pretty(call.error || (call.choices[0] && call.choices[0].text) || call.response)))),
    el("h3", {}, "Tokens", call.decoded ? "" : " (ids: no tokenizer)"),
    tokenLegend(),
    el("h4", {}, `Prompt (${call.prompt_tokens.length})`),
    tokenView(call.prompt_tokens, "prompt tokens"),
    el("h4", {}, `Response (${call.response_tokens.length})`),
    tokenView(call.response_tokens, "response tokens"),
  );
}

// A judge's call: never trained on, shown so a rollout's score can be read with its reasons.
async function showJudge(panel, rolloutId, span) {
  const current = select(panel, span);
  const judge = await api.get(`/rollouts/${encodeURIComponent(rolloutId)}/judge/${encodeURIComponent(span.span_id)}`);
  if (!current()) return;
  const ranked = Array.isArray(judge.scores);
  const given = ranked ? judge.scores.map((score, i) => `${i + 1}: ${fmt(score)}`).join(" · ") : fmt(judge.score);
  const parts = [
    el("h2", {}, "Judge call ", el("code", {}, judge.span_id)),
    el("p", { class: "muted" }, "The judge's own call while it scored this rollout: never trained on."),
    facts([
      ["model", judge.model],
      ["endpoint", judge.url],
      ["attempt", fmt(judge.attempt)],
      ["status", el("span", { class: `status ${judge.status}` }, judge.status)],
      ["latency", judge.latency_ms === null ? "–" : `${fmt(judge.latency_ms, 1)} ms`],
      [ranked ? "group scores" : "score", el("span", { id: "judge-score" }, given)],
    ]),
    ranked ? el("p", { class: "muted" }, "A ranking judge's scores of its group's attempts, in the order it was shown them (the rewards above hold this rollout's own).") : null,
    judge.message ? el("h3", {}, "Why it gave no score") : null,
    judge.message ? el("pre", { id: "judge-error", class: "text error" }, judge.message) : null,
    el("h3", {}, "Reply"),
    el("pre", { id: "judge-reply", class: "text" }, judge.reply ?? "– (no reply)"),
    el("h3", {}, "What the judge was shown"),
    el(
      "div",
      { id: "judge-prompt" },
      judge.messages.map((m) =>
        el(
          "details",
          { open: m.role === "user" },
          el("summary", {}, m.role, el("span", { class: "muted" }, ` · ${m.chars} characters${m.cut ? ", cut" : ""}`)),
          el("pre", { class: "text" }, m.content),
        ),
      ),
    ),
  ];
  panel.replaceChildren(...parts.filter((part) => part !== null));
}

function showTransitions(panel, view) {
  const outcome = (c) => (c.break_reason ? `${c.outcome} — chain broke: ${c.break_reason}` : c.outcome);
  panel.replaceChildren(
    el("h2", {}, "Transitions"),
    el("p", {}, view.summary),
    el("p", { class: "muted" }, `Advantages: ${view.method} over a group of ${view.group_size} rollouts` + (view.group_used ? "." : " — this group was not trained on (all its rewards were equal, or it had no trained tokens).")),
    el("h3", {}, "Calls"),
    scrolling(
      "table",
      { class: "calls" },
      el("thead", {}, el("tr", {}, ["call", "attempt", "agent", "became"].map((h) => el("th", {}, h)))),
      el("tbody", {}, view.calls.map((c) => el("tr", { class: c.break_reason ? "broke" : null }, el("td", {}, el("code", {}, c.span_id)), el("td", {}, fmt(c.attempt)), el("td", {}, c.agent || "–"), el("td", {}, outcome(c))))),
    ),
    ...view.transitions.map((t, i) =>
      el(
        "div",
        { class: "transition" },
        el("h3", {}, `Sample ${i + 1}: ${t.span_ids.length} call${t.span_ids.length > 1 ? "s merged" : ""}`),
        facts([
          ["reward", fmt(t.reward)],
          ["step reward", fmt(t.step_reward)],
          ["advantage", fmt(t.advantage)],
          ["loss weight", fmt(t.weight)],
          ["trained tokens", t.trained_tokens],
          ["policy version", fmt(t.policy_version)],
        ]),
        tokenLegend(),
        el("h4", {}, `Prompt (${t.prompt_tokens.length})`),
        tokenView(t.prompt_tokens, "transition prompt tokens"),
        el("h4", {}, `Response and observations (${t.response_tokens.length})`),
        tokenView(t.response_tokens, "transition response tokens"),
      ),
    ),
  );
}
