// The status page's script (components/render/status_page.py). It asks the front for each panel's fixed
// query with the metrics key and draws the answers: charts as SVG, tables as HTML. It loads nothing
// else; the front's Content-Security-Policy would refuse anything from another origin.
"use strict";

(function () {
  const spec = JSON.parse(document.getElementById("spec").textContent);
  const KEY_ITEM = "glm-status-metrics-key";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const COLORS = ["#2f6fde", "#e0662b", "#2a9d5b", "#b43ca7", "#c9a21a", "#5b6b7a", "#d23b3b", "#1aa5b8"];
  const grid = document.getElementById("grid");
  const form = document.getElementById("key-form");
  const message = document.getElementById("key-message");
  const updated = document.getElementById("updated");
  let timer = null;

  class Unauthorized extends Error {}

  function element(tag, attributes, text) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, value);
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function vector(tag, attributes, text) {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // A link may carry the key after '#' (never sent to a server): kept for this tab only.
  function takeKeyFromFragment() {
    const match = /^#key=(.+)$/.exec(window.location.hash);
    if (match) {
      sessionStorage.setItem(KEY_ITEM, decodeURIComponent(match[1]));
      history.replaceState(null, "", window.location.pathname);
    }
  }

  // How long before `now` (the server's clock, never the browser's: a headless browser's virtual
  // time or a skewed laptop clock would shift every age), and the event's own clock time.
  function ago(timestamp, now) {
    const seconds = Math.max(0, now - timestamp);
    const at = new Date(timestamp * 1000).toLocaleTimeString();
    if (seconds < 120) return `${seconds.toFixed(0)} s ago (${at})`;
    if (seconds < 7200) return `${(seconds / 60).toFixed(0)} min ago (${at})`;
    return `${(seconds / 3600).toFixed(1)} h ago (${at})`;
  }

  // Enough decimals to tell `value` apart from its neighbours a `step` away (an axis' ticks).
  function decimals(step) {
    for (let d = 0; d < 6; d++) if (Math.abs(Math.round(step * 10 ** d) - step * 10 ** d) < 1e-6) return d;
    return 6;
  }

  // A small duration keeps two significant digits: 0.4 ms is not "0 ms".
  function milliseconds(value) {
    const ms = value * 1000;
    return (ms >= 10 || ms === 0 ? ms.toFixed(0) : ms.toPrecision(2)) + " ms";
  }

  function format(unit, value, now) {
    if (value === undefined || Number.isNaN(value)) return "–";
    switch (unit) {
      case "ratio":
        return (value * 100).toFixed(1) + " %";
      case "seconds":
        return value < 1 ? milliseconds(value) : value.toFixed(2) + " s";
      case "per_second":
        return value.toFixed(1) + "/s";
      case "timestamp":
        return ago(value, now);
      case "pass":
        return value >= 1 ? "pass" : "FAIL";
      case "in_rotation":
        return value >= 1 ? "yes" : "no";
      default:
        return Number.isInteger(value) ? String(value) : value.toFixed(2);
    }
  }

  // The series' own name after the labels that tell series apart (host, ...).
  function legend(metric) {
    const labels = Object.keys(metric)
      .filter((name) => name !== "series")
      .sort()
      .map((name) => metric[name]);
    return [...labels, metric.series].join(" ");
  }

  // A chart's axis: its ticks 0, max/2 and max in one scale, with the decimals the step needs
  // (0.5 ms and 1 ms, not "1 ms / 1 ms / 0 ms").
  function tickFormat(unit, max) {
    const [scale, suffix] = {
      seconds: max < 1 ? [1000, " ms"] : [1, " s"],
      ratio: [100, " %"],
      per_second: [1, "/s"],
    }[unit] || [1, ""];
    const places = decimals((max / 2) * scale);
    return (value) => (value * scale).toFixed(places) + suffix;
  }

  function niceCeiling(value) {
    if (!(value > 0)) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) if (value <= step * power) return step * power;
    return 10 * power;
  }

  function drawChart(panel, result, body, now) {
    const unit = panel.series[0].unit;
    const [width, height, left, right, top, bottom] = [560, 170, 60, 8, 8, 20];
    const lines = result
      .map((r) => ({ name: legend(r.metric), points: r.values.map(([t, v]) => [t, parseFloat(v)]) }))
      .sort((a, b) => a.name.localeCompare(b.name));
    const end = now;
    const start = end - spec.historySeconds;
    const finite = lines.flatMap((l) => l.points.map((p) => p[1])).filter(Number.isFinite);
    const max = unit === "in_rotation" ? 1 : niceCeiling(Math.max(0, ...finite));
    const x = (t) => left + ((t - start) / (end - start)) * (width - left - right);
    const y = (v) => top + (1 - v / max) * (height - top - bottom);
    const chart = vector("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": panel.title });
    // A yes/no chart has no middle value to name.
    const tick = unit === "in_rotation" ? (value) => format(unit, value) : tickFormat(unit, max);
    for (const fraction of unit === "in_rotation" ? [0, 1] : [0, 0.5, 1]) {
      const value = max * fraction;
      chart.append(
        vector("line", { x1: left, x2: width - right, y1: y(value), y2: y(value), stroke: "#e3e7ec" }),
        vector("text", { x: left - 6, y: y(value) + 3, "text-anchor": "end", class: "tick" }, tick(value)),
      );
    }
    const minutes = Math.round(spec.historySeconds / 60);
    for (const [t, label] of [[start, `-${minutes} min`], [start + (end - start) / 2, `-${minutes / 2} min`], [end, "now"]]) {
      chart.append(vector("text", { x: x(t), y: height - 4, "text-anchor": t === end ? "end" : "middle" }, label));
    }
    const items = element("ul", { class: "legend" });
    lines.forEach((line, index) => {
      const color = COLORS[index % COLORS.length];
      let path = "";
      let drawing = false;
      for (const [t, v] of line.points) {
        if (!Number.isFinite(v)) {
          drawing = false;
          continue;
        }
        path += `${drawing ? "L" : "M"}${x(t).toFixed(1)} ${y(v).toFixed(1)}`;
        drawing = true;
      }
      chart.append(vector("path", { d: path, fill: "none", stroke: color, "stroke-width": 1.6 }));
      // A point with no neighbour draws no line (a fresh Prometheus has one): a dot, as the last.
      line.points.forEach(([t, v], i) => {
        const drawn = (j) => j >= 0 && j < line.points.length && Number.isFinite(line.points[j][1]);
        if (drawn(i) && ((!drawn(i - 1) && !drawn(i + 1)) || i === line.points.length - 1)) {
          chart.append(vector("circle", { cx: x(t).toFixed(1), cy: y(v).toFixed(1), r: 2.5, fill: color }));
        }
      });
      const swatch = element("span", { class: "swatch" });
      swatch.style.backgroundColor = color;
      const last = line.points.length ? line.points[line.points.length - 1][1] : undefined;
      const item = element("li");
      item.append(swatch, `${line.name}: ${format(unit, last, now)}`);
      items.append(item);
    });
    body.append(chart, items);
  }

  function drawTable(panel, result, body) {
    const rows = new Map();
    let now = 0;
    for (const r of result) {
      const labels = panel.rows.map((name) => r.metric[name] || "");
      const key = JSON.stringify(labels);
      if (!rows.has(key)) rows.set(key, { labels, cells: {} });
      rows.get(key).cells[r.metric.series] = parseFloat(r.value[1]);
      now = Math.max(now, r.value[0]); // the time Prometheus evaluated the query at
    }
    const table = element("table");
    const head = element("tr");
    for (const name of panel.rows) head.append(element("th", { class: "label" }, name));
    for (const series of panel.series) head.append(element("th", {}, series.name));
    table.append(head);
    const sorted = [...rows.values()].sort((a, b) => a.labels.join("\u0000").localeCompare(b.labels.join("\u0000")));
    for (const row of sorted) {
      const tr = element("tr");
      for (const label of row.labels) tr.append(element("td", { class: "label" }, label));
      for (const series of panel.series) {
        const value = row.cells[series.name];
        const cell = element("td", {}, format(series.unit, value, now));
        if (series.unit === "pass" && value !== undefined) cell.className = value >= 1 ? "pass" : "fail";
        tr.append(cell);
      }
      table.append(tr);
    }
    body.append(table);
  }

  async function query(name) {
    const response = await fetch("query/" + name, {
      headers: { Authorization: "Bearer " + sessionStorage.getItem(KEY_ITEM) },
      cache: "no-store",
    });
    if (response.status === 401) throw new Unauthorized("the metrics key was refused");
    let body = {};
    try {
      body = await response.json();
    } catch (_) {
      // Not JSON: the status line says enough.
    }
    if (!response.ok || body.status !== "success") {
      const error = typeof body.error === "string" ? body.error : body.error && body.error.message;
      throw new Error(error || `HTTP ${response.status}`);
    }
    // The front's clock (its Date header) is "now" for a chart's time axis.
    const date = Date.parse(response.headers.get("Date"));
    return { result: body.data.result, now: Number.isFinite(date) ? date / 1000 : Date.now() / 1000 };
  }

  const boxes = new Map();
  for (const panel of spec.panels) {
    const section = element("section", { class: "panel", "data-panel": panel.name, "data-state": "loading" });
    // A table of many columns takes the whole row; charts and small tables go two a row.
    if (panel.kind === "table" && panel.rows.length + panel.series.length >= 5) section.classList.add("wide");
    const body = element("div", { class: "body" }, "loading…");
    section.append(element("h2", {}, panel.title), body);
    grid.append(section);
    boxes.set(panel.name, { section, body });
  }

  function askForKey(text) {
    clearTimeout(timer);
    release();
    sessionStorage.removeItem(KEY_ITEM);
    message.textContent = text;
    form.hidden = false;
    grid.hidden = true;
  }

  // The document's load event waits for a pending image, never for a fetch: a hidden one held by
  // the front (/status/hold) until the first answers are drawn, so that a headless browser's
  // screenshot (taken at the load event) shows them. Dropped at once after.
  let hold = null;
  if (document.readyState !== "complete") {
    hold = element("img", { src: "hold", alt: "", hidden: "" });
    document.body.append(hold);
  }

  function release() {
    if (hold) hold.remove();
    hold = null;
  }

  async function refresh() {
    clearTimeout(timer);
    const answers = await Promise.allSettled(spec.panels.map((panel) => query(panel.name)));
    if (answers.some((a) => a.status === "rejected" && a.reason instanceof Unauthorized)) {
      askForKey(
        "The front refused that key: only a metrics key (glm:metricsKeys) opens this page. On the local " +
          "stack, scripts/status_page.sh url prints the page's address with its key (make up prints it too).",
      );
      return;
    }
    answers.forEach((answer, index) => {
      const panel = spec.panels[index];
      const { section, body } = boxes.get(panel.name);
      body.replaceChildren();
      if (answer.status === "rejected") {
        section.dataset.state = "error";
        body.textContent = "Prometheus did not answer: " + answer.reason.message;
      } else if (answer.value.result.length === 0) {
        section.dataset.state = "empty";
        body.textContent = "no data yet";
      } else {
        section.dataset.state = "ok";
        (panel.kind === "chart" ? drawChart : drawTable)(panel, answer.value.result, body, answer.value.now);
      }
    });
    updated.textContent = "updated " + new Date().toLocaleTimeString();
    release();
    timer = setTimeout(refresh, spec.refreshSeconds * 1000);
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_ITEM, document.getElementById("key").value);
    form.hidden = true;
    grid.hidden = false;
    refresh();
  });

  takeKeyFromFragment();
  if (sessionStorage.getItem(KEY_ITEM)) refresh();
  else askForKey("");
})();
