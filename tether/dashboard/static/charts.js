// Reward and held-out curves of one or more runs (uPlot), and the curriculum's pool sizes when the train
// records carry `curriculum.*` keys. Each run's metrics are read incrementally from a byte offset, once a
// second for every plotted run (a finished run's poll returns nothing new), so a live run's curve grows
// as the run writes.
"use strict";

const POLL_MS = 1000;
const PALETTE = ["#2f7ed8", "#e4572e", "#29a36a", "#a05fd6", "#d4a106", "#17a2b8"];
const POOL_PREFIX = "curriculum.";
const POOL_COLORS = { active: "#2f7ed8", mixed: "#29a36a", parked: "#d4a106", retired: "#a05fd6" };
const RUN_DASHES = [[], [6, 4], [2, 3], [10, 3, 2, 3]];

function emptyRun() {
  return { offset: 0, train: [], val: [], pools: {} }; // pools: name -> [[step, size]]
}

class RunCurves {
  constructor(container, poolsContainer) {
    this.container = container;
    this.poolsContainer = poolsContainer || null; // shown only when some run has curriculum pools
    this.runs = new Map(); // name -> emptyRun()
    this.plot = null;
    this.poolsPlot = null;
    this.timer = null;
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

  async poll() {
    let changed = false;
    for (const [name, run] of this.runs) {
      const chunk = await api.get(`/runs/${encodeURIComponent(name)}/metrics`, { offset: run.offset });
      if (chunk.offset < run.offset) Object.assign(run, emptyRun()); // rewritten on resume
      run.offset = chunk.offset;
      for (const record of chunk.records) {
        if (record.kind === "train") {
          run.train.push([record.step, record.reward_mean]);
          addPools(run.pools, record);
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

  poolSeries() {
    const tables = [];
    const series = [{ label: "step" }];
    let index = 0; // runs with pools: the first solid, the next dashed
    for (const [name, run] of this.runs) {
      if (!Object.keys(run.pools).length) continue;
      const dash = RUN_DASHES[index++ % RUN_DASHES.length];
      for (const [pool, rows] of Object.entries(run.pools)) {
        tables.push(rows);
        const stroke = POOL_COLORS[pool] || PALETTE[tables.length % PALETTE.length];
        series.push({ label: `${name} ${pool}`, stroke, width: 2, dash, spanGaps: true });
      }
    }
    return { tables, series };
  }

  draw() {
    const { tables, series } = this.series();
    this.plot = drawChart(this.container, this.plot, tables, series, "reward / accuracy", this.width());
    if (!this.plot) this.container.append(el("p", { class: "muted" }, "No metrics yet for the selected runs."));
    if (this.poolsContainer) {
      const pools = this.poolSeries();
      const card = this.poolsContainer.closest("section") || this.poolsContainer;
      card.hidden = !pools.tables.length;
      this.poolsPlot = drawChart(this.poolsContainer, this.poolsPlot, pools.tables, pools.series, "tasks", this.width());
    }
    performance.mark("tether:chart-drawn");
  }

  width() {
    return Math.max(280, this.container.clientWidth || 600);
  }

  fit() {
    for (const plot of [this.plot, this.poolsPlot]) if (plot) plot.setSize({ width: this.width(), height: 280 });
  }
}

// A train record's `curriculum.<pool>` sizes, appended to each pool's [[step, size]].
function addPools(pools, record) {
  for (const [key, value] of Object.entries(record)) {
    if (!key.startsWith(POOL_PREFIX) || typeof value !== "number") continue;
    const pool = key.slice(POOL_PREFIX.length);
    (pools[pool] = pools[pool] || []).push([record.step, value]);
  }
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
