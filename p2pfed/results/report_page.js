// The report page: SVG line charts, sortable tables and the graph with its time slider, drawn
// from the JSON inlined in the page (#report-data). No library, nothing fetched.
"use strict";
const NS = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];

function el(tag, attrs, parent) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function html(tag, text, parent) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}

function fmt(v) {
  if (typeof v !== "number") return v === null || v === undefined ? "" : String(v);
  return Number.isInteger(v) ? String(v) : String(+v.toPrecision(4));
}

// series: [{name, x: [], y: [], lo?: [], hi?: []}]; a band between lo and hi where given
function lineChart(parent, title, xLabel, series) {
  const W = 460, H = 280, L = 60, R = 10, T = 24, B = 40;
  const svg = el("svg", {width: W, height: H, class: "chart"}, parent);
  const pts = series.flatMap(s => s.x.map((x, i) => [x, s.y[i], (s.lo || s.y)[i], (s.hi || s.y)[i]]))
    .filter(p => p[1] !== null);
  if (!pts.length) return svg;
  const xs = pts.map(p => p[0]), ys = pts.flatMap(p => [p[1], p[2], p[3]]).filter(v => v !== null);
  let [x0, x1, y0, y1] = [Math.min(...xs), Math.max(...xs), Math.min(...ys), Math.max(...ys)];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R), sy = y => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  el("text", {x: W / 2, y: 16, "text-anchor": "middle", "font-size": 13}, svg).textContent = title;
  el("text", {x: W / 2, y: H - 6, "text-anchor": "middle", "font-size": 11}, svg).textContent = xLabel;
  el("line", {x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#444"}, svg);
  el("line", {x1: L, y1: T, x2: L, y2: H - B, stroke: "#444"}, svg);
  for (let i = 0; i <= 4; i++) {
    const xv = x0 + (x1 - x0) * i / 4, yv = y0 + (y1 - y0) * i / 4;
    el("text", {x: sx(xv), y: H - B + 14, "text-anchor": "middle", "font-size": 10}, svg).textContent = String(+xv.toPrecision(3));
    el("text", {x: L - 4, y: sy(yv) + 3, "text-anchor": "end", "font-size": 10}, svg).textContent = String(+yv.toPrecision(3));
  }
  series.forEach((s, k) => {
    const colour = COLOURS[k % COLOURS.length];
    const ok = s.x.map((_, i) => i).filter(i => s.y[i] !== null);
    if (s.lo && s.hi) {
      const band = ok.map(i => `${sx(s.x[i])},${sy(s.hi[i])}`).concat(
        ok.slice().reverse().map(i => `${sx(s.x[i])},${sy(s.lo[i])}`));
      el("polygon", {points: band.join(" "), fill: colour, "fill-opacity": 0.2, stroke: "none"}, svg);
    }
    el("polyline", {points: ok.map(i => `${sx(s.x[i])},${sy(s.y[i])}`).join(" "), fill: "none",
                    stroke: colour, "stroke-width": 2}, svg);
    el("rect", {x: L + 8, y: T + 4 + 14 * k, width: 10, height: 10, fill: colour}, svg);
    el("text", {x: L + 22, y: T + 13 + 14 * k, "font-size": 11}, svg).textContent = s.name;
  });
  return svg;
}

// bars: [{label, value, colour?}]
function barChart(parent, title, bars, scale) {
  const W = 460, H = 280, L = 60, T = 24, B = 50, top = scale || Math.max(...bars.map(b => b.value), 1e-12);
  const svg = el("svg", {width: W, height: H, class: "chart"}, parent);
  el("text", {x: W / 2, y: 16, "text-anchor": "middle", "font-size": 13}, svg).textContent = title;
  el("line", {x1: L, y1: H - B, x2: W - 10, y2: H - B, stroke: "#444"}, svg);
  el("text", {x: L - 4, y: T + 4, "text-anchor": "end", "font-size": 10}, svg).textContent = String(+top.toPrecision(3));
  const step = (W - L - 10) / bars.length;
  bars.forEach((b, i) => {
    const h = (H - T - B) * b.value / top, x = L + i * step + step * 0.1;
    el("rect", {x, y: H - B - h, width: step * 0.8, height: h, fill: b.colour || COLOURS[0], class: "bar"}, svg);
    el("text", {x: x + step * 0.4, y: H - B + 14, "text-anchor": "middle", "font-size": 10}, svg).textContent = b.label;
  });
  return svg;
}

// the paired comparisons: each difference in F1 with its 95 % interval, zero marked
function forestPlot(parent, rows) {
  const W = 760, L = 330, R = 20, T = 24, step = 18, H = T + step * rows.length + 30;
  const svg = el("svg", {width: W, height: H, class: "chart"}, parent);
  const ends = rows.flatMap(r => [r.f1_diff_ci_low, r.f1_diff_ci_high, r.f1_diff, 0]).filter(v => typeof v === "number");
  let [x0, x1] = [Math.min(...ends), Math.max(...ends)];
  if (x1 === x0) x1 = x0 + 1;
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  el("text", {x: W / 2, y: 16, "text-anchor": "middle", "font-size": 13}, svg).textContent =
    "F1 difference a − b over seeds (95 % interval)";
  el("line", {x1: sx(0), y1: T, x2: sx(0), y2: H - 30, stroke: "#888", "stroke-dasharray": "4 3"}, svg);
  rows.forEach((r, i) => {
    const y = T + step * (i + 0.5);
    el("text", {x: L - 6, y: y + 4, "text-anchor": "end", "font-size": 10}, svg).textContent =
      `${r.a} vs ${r.b} (${r.protocol})`;
    if (typeof r.f1_diff_ci_low === "number" && typeof r.f1_diff_ci_high === "number")
      el("line", {x1: sx(r.f1_diff_ci_low), y1: y, x2: sx(r.f1_diff_ci_high), y2: y, stroke: COLOURS[0]}, svg);
    if (typeof r.f1_diff === "number") el("circle", {cx: sx(r.f1_diff), cy: y, r: 3.5, fill: COLOURS[0]}, svg);
  });
  for (const v of [x0, 0, x1])
    el("text", {x: sx(v), y: H - 12, "text-anchor": "middle", "font-size": 10}, svg).textContent = String(+v.toPrecision(3));
  return svg;
}

// a table whose rows sort by the clicked header (again: the other way)
function sortableTable(parent, columns, rows, cellClass) {
  const table = html("table", undefined, parent), head = html("tr", undefined, html("thead", undefined, table));
  const body = html("tbody", undefined, table);
  let order = {column: null, sign: 1};
  const fill = () => {
    body.textContent = "";
    for (const row of rows) {
      const tr = html("tr", undefined, body);
      for (const c of columns) {
        const td = html("td", fmt(row[c]), tr);
        if (cellClass) td.className = cellClass(row, c);
      }
    }
  };
  for (const c of columns) {
    html("th", c, head).addEventListener("click", () => {
      order = {column: c, sign: order.column === c ? -order.sign : 1};
      rows.sort((a, b) => {
        const [u, v] = [a[c], b[c]];
        const cmp = typeof u === "number" && typeof v === "number" ? u - v : String(u).localeCompare(String(v));
        return order.sign * cmp;
      });
      fill();
    });
  }
  fill();
  return table;
}

// the graph on a circle (a device keeps its place); with several instants, a slider redraws it
function graphView(parent, graph, roles) {
  const W = 360, R = 140, C = W / 2;
  const box = html("div", undefined, parent);
  const caption = html("div", "", box);
  const svg = el("svg", {width: W, height: W, id: "graph"}, box);
  const at = i => [C + R * Math.cos(2 * Math.PI * i / graph.n), C + R * Math.sin(2 * Math.PI * i / graph.n)];
  const draw = k => {
    svg.textContent = "";
    for (const [a, b] of graph.edges[k]) {
      const [p, q] = [at(a), at(b)];
      el("line", {x1: p[0], y1: p[1], x2: q[0], y2: q[1], stroke: "#ff7f0e", "stroke-width": 1.5}, svg);
    }
    for (let i = 0; i < graph.n; i++) {
      const [x, y] = at(i);
      el("circle", {cx: x, cy: y, r: 8, fill: roles[i] && roles[i] !== "honest" ? "#d62728" : "#1f77b4"}, svg);
      el("text", {x, y: y + 4, "text-anchor": "middle", "font-size": 9, fill: "#fff"}, svg).textContent = i;
    }
    const t = graph.times[k];
    caption.textContent = (t === null ? "topology" : `contacts during ${t[0].toFixed(1)}–${t[1].toFixed(1)} s`)
      + `: ${graph.edges[k].length} links`;
  };
  if (graph.times.length > 1) {
    const slider = html("input", undefined, box);
    Object.assign(slider, {type: "range", min: 0, max: graph.times.length - 1, value: 0, id: "time-slider"});
    slider.style.width = W + "px";
    slider.style.display = "block";
    slider.addEventListener("input", () => draw(+slider.value));
  }
  draw(0);
}

function column(rows, c) { return rows.map(r => (r[c] === undefined ? null : r[c])); }

function runPage(root, d) {
  const xLabel = d.x === "round" ? "round" : "simulated time (s)", x = column(d.rounds, d.x);
  html("h2", "Macro-F1 over " + (d.x === "round" ? "rounds" : "time") + " (devices' mean ± std)", root);
  const plots = html("div", undefined, root);
  plots.className = "plots";
  const mean = column(d.rounds, "f1_macro_mean"), std = column(d.rounds, "f1_macro_std");
  const f1 = [{name: "f1 (headline)", x, y: mean, lo: mean.map((m, i) => m - (std[i] || 0)), hi: mean.map((m, i) => m + (std[i] || 0))}];
  for (const p of ["after_fusion", "after_training"]) {
    if (d.rounds.length && ("f1_" + p + "_mean") in d.rounds[0])
      f1.push({name: p.replace("_", " "), x, y: column(d.rounds, "f1_" + p + "_mean")});
  }
  lineChart(plots, "macro-F1", xLabel, f1);
  lineChart(plots, "bytes sent (total)", xLabel, [{name: "bytes", x, y: column(d.rounds, "bytes_sent_total")}]);
  lineChart(plots, "messages", xLabel, ["messages_sent", "messages_dropped"].map(c => ({name: c, x, y: column(d.rounds, c)})));
  const energy = d.rounds.length ? Object.keys(d.rounds[0]).filter(c => /energy|battery|joule/i.test(c)) : [];
  if (energy.length) lineChart(plots, "energy", xLabel, energy.map(c => ({name: c, x, y: column(d.rounds, c)})));
  if (d.devices.some(r => typeof r.energy_j === "number"))
    barChart(plots, "energy used per device (J)", d.devices.map(r => ({label: String(r.device), value: r.energy_j || 0})));
  const powered = d.devices.filter(r => typeof r.battery_j === "number");
  if (powered.length)
    barChart(plots, "battery left (J; scale: the largest battery)",
             powered.map(r => ({label: String(r.device), value: r.battery_left_j || 0})),
             Math.max(...powered.map(r => r.battery_j)));
  const roles = [...new Set(d.devices.map(r => r.role))];
  if (roles.length > 1) {
    const f1 = role => { const v = d.devices.filter(r => r.role === role).map(r => r.f1_macro);
                         return v.reduce((a, b) => a + b, 0) / v.length; };
    barChart(plots, "final macro-F1: honest vs adversarial devices",
             roles.map(role => ({label: role, value: f1(role), colour: role === "honest" ? COLOURS[0] : COLOURS[3]})));
  }
  if (d.graph) {
    html("h2", d.graph.times.length > 1 ? "Contact graph over time" : "Topology", root);
    graphView(root, d.graph, d.devices.map(r => r.role));
  }
  html("h2", "Devices (click a header to sort; adversaries in red)", root);
  const columns = d.devices.length ? Object.keys(d.devices[0]) : [];
  sortableTable(root, columns, d.devices, row => (row.role !== "honest" ? "adversary" : ""));
  html("h2", "Summary", root);
  const facts = Object.entries(d.facts).map(([k, v]) => ({field: k, value: v}));
  sortableTable(root, ["field", "value"], facts).className = "facts";
}

function sweepPage(root, d) {
  html("h2", "Macro-F1 over " + (d.x === "round" ? "rounds" : "time") + " (mean ± std over seeds)", root);
  const plots = html("div", undefined, root);
  plots.className = "plots";
  for (const panel of d.panels) lineChart(plots, panel.title, d.x === "round" ? "round" : "simulated time (s)", panel.series);
  html("h2", "Summary (click a header to sort)", root);
  sortableTable(root, d.summary.length ? Object.keys(d.summary[0]) : [], d.summary);
  html("h2", "Paired comparisons (by seed)", root);
  if (d.paired.length) forestPlot(root, d.paired);
  sortableTable(root, d.paired.length ? Object.keys(d.paired[0]) : [], d.paired);
}

const data = JSON.parse(document.getElementById("report-data").textContent);
(data.kind === "sweep" ? sweepPage : runPage)(document.getElementById("report"), data);
