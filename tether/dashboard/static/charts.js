// Reward and held-out curves of one or more runs (uPlot). Each run's metrics are read incrementally from
// a byte offset, once a second for every plotted run (a finished run's poll returns nothing new), so a
// live run's curve grows as the run writes.
"use strict";

const POLL_MS = 1000;
const PALETTE = ["#2f7ed8", "#e4572e", "#29a36a", "#a05fd6", "#d4a106", "#17a2b8"];

class RunCurves {
  constructor(container) {
    this.container = container;
    this.runs = new Map(); // name -> {offset, train: [[step, reward]], val: [[step, score]]}
    this.plot = null;
    this.timer = null;
    this.resize = new ResizeObserver(() => this.fit());
    this.resize.observe(container);
  }

  async show(names) {
    for (const name of [...this.runs.keys()]) if (!names.includes(name)) this.runs.delete(name);
    for (const name of names) {
      if (!this.runs.has(name)) this.runs.set(name, { offset: 0, train: [], val: [] });
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
      if (chunk.offset < run.offset) Object.assign(run, { train: [], val: [] }); // rewritten on resume
      run.offset = chunk.offset;
      for (const record of chunk.records) {
        if (record.kind === "train") run.train.push([record.step, record.reward_mean]);
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

  draw() {
    const { tables, series } = this.series();
    const points = tables.reduce((sum, table) => sum + table.length, 0);
    this.container.dataset.points = String(points);
    if (this.plot) this.plot.destroy();
    this.plot = null;
    this.container.replaceChildren();
    if (!tables.length) {
      this.container.append(el("p", { class: "muted" }, "No metrics yet for the selected runs."));
      return;
    }
    const columns = tables.map((rows) => [rows.map((r) => r[0]), rows.map((r) => r[1])]);
    const data = uPlot.join(columns);
    const styles = getComputedStyle(document.body);
    const axis = { stroke: styles.color, grid: { stroke: styles.getPropertyValue("--grid") } };
    const options = {
      width: this.width(),
      height: 280,
      scales: { x: { time: false } },
      axes: [{ ...axis, label: "step" }, { ...axis, label: "reward / accuracy" }],
      series,
      cursor: { drag: { x: true, y: false } },
    };
    this.plot = new uPlot(options, data, this.container);
    performance.mark("tether:chart-drawn");
  }

  width() {
    return Math.max(280, this.container.clientWidth || 600);
  }

  fit() {
    if (this.plot) this.plot.setSize({ width: this.width(), height: 280 });
  }
}
