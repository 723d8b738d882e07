// Reward and held-out curves of one or more runs (uPlot), the curriculum's pool sizes when the train
// records carry `curriculum.*` keys, and each policy's loss and version in a run of several policies
// (`train.<policy>.loss`, `policy_version.<policy>`), and RL's signal: the policy's entropy and the share of
// a step's groups whose rewards vary (`train.entropy`, `groups_used` of `groups`). Each run's metrics are read incrementally from a
// byte offset, once a second for every plotted run (a finished run's poll returns nothing new), so a
// live run's curve grows as the run writes.
"use strict";

const POLL_MS = 1000;
const PALETTE = ["#2f7ed8", "#e4572e", "#29a36a", "#a05fd6", "#d4a106", "#17a2b8"];
const POOL_PREFIX = "curriculum.";
const POLICY_LOSS = ["train.", ".loss"];
const POLICY_VERSION = "policy_version.";
const POOL_COLORS = { active: "#2f7ed8", mixed: "#29a36a", parked: "#d4a106", retired: "#a05fd6" };
const RUN_DASHES = [[], [6, 4], [2, 3], [10, 3, 2, 3]];
const SIGNAL_COLORS = { entropy: "#17a2b8", "groups with signal": "#e4572e" };

function emptyRun() {
  // pools: name -> [[step, size]]; policies: name -> [[step, loss]]; versions: name -> [[step, version]];
  // signal: "entropy" and "groups with signal" -> [[step, value]]
  return { offset: 0, train: [], val: [], pools: {}, policies: {}, versions: {}, signal: {} };
}

class RunCurves {
  constructor(container, poolsContainer, policiesContainer, signalContainer) {
    this.container = container;
    this.signalContainer = signalContainer || null; // shown only when some run has RL updates
    this.poolsContainer = poolsContainer || null; // shown only when some run has curriculum pools
    this.policiesContainer = policiesContainer || null; // shown only when some run has several policies
    this.runs = new Map(); // name -> emptyRun()
    this.plot = null;
    this.poolsPlot = null;
    this.policiesPlot = null;
    this.signalPlot = null;
    this.timer = null;
    this.polling = Promise.resolve();
    this.resize = new ResizeObserver(() => this.fit());
    this.resize.observe(container);
  }

  async show(names) {
    for (const name of [...this.runs.keys()]) if (!names.includes(name)) this.runs.delete(name);
    for (const name of names) {
      if (!this.runs.has(name)) this.runs.set(name, emptyRun());
    }
    await this.poll();
    this.draw();
    clearInterval(this.timer);
    this.timer = setInterval(() => this.poll().catch(() => {}), POLL_MS);
  }

  stop() {
    clearInterval(this.timer);
    this.resize.disconnect();
  }

  // One poll at a time: two at once (a box ticked while the timer's poll waits) would both read a run
  // from the same offset and add its records twice.
  poll() {
    const next = this.polling.then(() => this.pollOnce());
    this.polling = next.catch(() => {});
    return next;
  }

  async pollOnce() {
    let changed = false;
    for (const [name, run] of this.runs) {
      const chunk = await api.get(`/runs/${encodeURIComponent(name)}/metrics`, { offset: run.offset });
      if (chunk.offset < run.offset) Object.assign(run, emptyRun()); // rewritten on resume
      run.offset = chunk.offset;
      for (const record of chunk.records) {
        if (record.kind === "train") {
          run.train.push([record.step, record.reward_mean]);
          addNamed(run.pools, record, POOL_PREFIX);
          addNamed(run.policies, record, ...POLICY_LOSS);
          addNamed(run.versions, record, POLICY_VERSION);
          addSignal(run.signal, record);
        }
        if (record.kind === "val") run.val.push([record.step, record.val_score]);
      }
      changed = changed || chunk.records.length > 0;
    }
    if (changed) this.draw();
  }

  series() {
    const tables = [];
    const series = [{ label: "step" }];
    let color = 0;
    for (const [name, run] of this.runs) {
      const stroke = PALETTE[color++ % PALETTE.length];
      if (run.train.length) {
        tables.push(run.train);
        series.push({ label: `${name} reward`, stroke, width: 2, spanGaps: true });
      }
      if (run.val.length) {
        tables.push(run.val);
        series.push({ label: `${name} held-out`, stroke, width: 2, dash: [6, 4], spanGaps: true });
      }
    }
    return { tables, series };
  }

  // One series per name in each run's `field` (name -> [[step, value]]): the first such run solid, the
  // next dashed; `label(runName, name, run)` names a series.
  namedSeries(field, color, label) {
    const tables = [];
    const series = [{ label: "step" }];
    let index = 0;
    for (const [name, run] of this.runs) {
      if (!Object.keys(run[field]).length) continue;
      const dash = RUN_DASHES[index++ % RUN_DASHES.length];
      for (const [key, rows] of Object.entries(run[field])) {
        tables.push(rows);
        series.push({ label: label(name, key, run), stroke: color(key, tables.length), width: 2, dash, spanGaps: true });
      }
    }
    return { tables, series };
  }

  poolSeries() {
    const color = (pool, n) => POOL_COLORS[pool] || PALETTE[n % PALETTE.length];
    return this.namedSeries("pools", color, (name, pool) => `${name} ${pool}`);
  }

  // Each policy's loss, its legend naming the policy's latest version.
  policySeries() {
    const color = (policy, n) => PALETTE[n % PALETTE.length];
    const label = (name, policy, run) => {
      const versions = run.versions[policy];
      return `${name} ${policy}` + (versions ? ` (v${versions[versions.length - 1][1]})` : "");
    };
    return this.namedSeries("policies", color, label);
  }

  signalSeries() {
    const color = (name, n) => SIGNAL_COLORS[name] || PALETTE[n % PALETTE.length];
    return this.namedSeries("signal", color, (name, key) => `${name} ${key}`);
  }

  draw() {
    const { tables, series } = this.series();
    this.plot = drawChart(this.container, this.plot, tables, series, "reward / accuracy", this.width());
    if (!this.plot) this.container.append(el("p", { class: "muted" }, "No metrics yet for the selected runs."));
    if (this.poolsContainer) this.poolsPlot = this.drawCard(this.poolsContainer, this.poolsPlot, this.poolSeries(), "tasks");
    if (this.policiesContainer) this.policiesPlot = this.drawCard(this.policiesContainer, this.policiesPlot, this.policySeries(), "loss");
    if (this.signalContainer) this.signalPlot = this.drawCard(this.signalContainer, this.signalPlot, this.signalSeries(), "entropy / share");
    performance.mark("tether:chart-drawn");
  }

  // A chart in a card of its own, the card hidden while no run has its series.
  drawCard(container, previous, { tables, series }, yLabel) {
    (container.closest("section") || container).hidden = !tables.length;
    return drawChart(container, previous, tables, series, yLabel, this.width());
  }

  width() {
    return Math.max(280, this.container.clientWidth || 600);
  }

  fit() {
    for (const plot of [this.plot, this.poolsPlot, this.policiesPlot, this.signalPlot]) if (plot) plot.setSize({ width: this.width(), height: 280 });
  }
}

// A train record's `<prefix><name><suffix>` numbers (`curriculum.<pool>`, `train.<policy>.loss`),
// appended to each name's [[step, value]] in `named`.
function addNamed(named, record, prefix, suffix = "") {
  for (const [key, value] of Object.entries(record)) {
    if (!key.startsWith(prefix) || !key.endsWith(suffix) || typeof value !== "number") continue;
    const name = key.slice(prefix.length, key.length - suffix.length);
    if (name) (named[name] = named[name] || []).push([record.step, value]);
  }
}

// An RL update's entropy and share of groups with signal (imitation updates have neither).
function addSignal(signal, record) {
  if (record.phase === "sft") return;
  const add = (name, value) => (signal[name] = signal[name] || []).push([record.step, value]);
  if (typeof record["train.entropy"] === "number") add("entropy", record["train.entropy"]);
  const groups = typeof record.groups === "number" ? record.groups : null;
  if (groups && typeof record.groups_used === "number") add("groups with signal", record.groups_used / groups);
}

// Replaces `previous` (a uPlot or null) in `container` with a plot of `tables` ([[x, y]] each); null
// when there is nothing to plot. The container's data-points counts the points, for tests.
function drawChart(container, previous, tables, series, yLabel, width) {
  if (previous) previous.destroy();
  container.replaceChildren();
  container.dataset.points = String(tables.reduce((sum, table) => sum + table.length, 0));
  if (!tables.length) return null;
  const columns = tables.map((rows) => [rows.map((r) => r[0]), rows.map((r) => r[1])]);
  const styles = getComputedStyle(document.body);
  const axis = { stroke: styles.color, grid: { stroke: styles.getPropertyValue("--grid") } };
  const options = {
    width,
    height: 280,
    scales: { x: { time: false } },
    axes: [{ ...axis, label: "step" }, { ...axis, label: yLabel }],
    series,
    cursor: { drag: { x: true, y: false } },
  };
  return new uPlot(options, uPlot.join(columns), container);
}
