/* rollout-sidecar run page: draws /v1/runs/{id}/page and /v1/runs/{id}/timeline with uPlot.
 *
 * Three modes, read from <body data-mode>: "index" (the run list, polled), "live" (one run,
 * polled every POLL_MS) and "saved" (a file: the data is the JSON in #page-data, no request).
 * Every text that came from a client (run ids, identities, check details) reaches the DOM
 * through textContent or an attribute set by setAttribute: never parsed as HTML.
 */
(function () {
  "use strict";

  var POLL_MS = 2000;
  var state = { body: null, timeline: null, charts: {}, refreshes: 0, errors: 0, lastError: null };
  window.sidecarPage = state;

  // -- DOM helpers (text only) ---------------------------------------------------------------

  function el(tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (key) {
        if (key === "text") node.textContent = attrs[key];
        else node.setAttribute(key, attrs[key]);
      });
    }
    for (var i = 2; i < arguments.length; i++) {
      var child = arguments[i];
      if (child === null || child === undefined) continue;
      node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function fmt(value, digits) {
    if (value === null || value === undefined) return "\u2013";
    if (typeof value !== "number") return String(value);
    if (!isFinite(value)) return String(value);
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    return value.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 2 : digits });
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "\u2013";
    var sign = seconds < 0 ? "\u2212" : "";
    var s = Math.abs(seconds);
    if (s < 120) return sign + fmt(s, 1) + " s";
    if (s < 7200) return sign + fmt(s / 60, 1) + " min";
    return sign + fmt(s / 3600, 2) + " h";
  }

  function clock(unix) {
    if (unix === null || unix === undefined) return "\u2013";
    return new Date(unix * 1000).toISOString().replace("T", " ").slice(0, 19) + " UTC";
  }

  function table(headers, rows, name) {
    var head = el("tr", null);
    headers.forEach(function (h) { head.appendChild(el("th", { scope: "col", text: h })); });
    var body = el("tbody", null);
    rows.forEach(function (row) {
      var tr = el("tr", null);
      row.forEach(function (cell) {
        tr.appendChild(cell instanceof Node ? el("td", null, cell) : el("td", { text: fmt(cell) }));
      });
      body.appendChild(tr);
    });
    var t = el("table", null, el("thead", null, head), body);
    if (name) t.setAttribute("data-table", name);
    return t;
  }

  function facts(pairs, name) {
    var dl = el("dl", { class: "facts" });
    if (name) dl.setAttribute("data-facts", name);
    pairs.forEach(function (pair) {
      var dd = el("dd", { text: pair[1] });
      if (pair[2] !== undefined) dd.setAttribute("data-value", String(pair[2]));
      if (pair[3]) dd.setAttribute("data-key", pair[3]);
      dl.appendChild(el("div", null, el("dt", { text: pair[0] }), dd));
    });
    return dl;
  }

  function details(summary, content) {
    var node = el("details", null, el("summary", { text: summary }), content);
    var name = content.getAttribute && content.getAttribute("data-table");
    if (name) node.setAttribute("data-key", name);
    return node;
  }

  function keptView() {
    // What a refresh must not undo: open tables, scrolled lists (the page's own scroll is kept
    // by holding the old height while the new content is built).
    var open = {};
    Array.prototype.forEach.call(document.querySelectorAll("details[open][data-key]"), function (d) {
      open[d.getAttribute("data-key")] = true;
    });
    var scrolled = Array.prototype.map.call(document.querySelectorAll(".scroll"), function (n) { return n.scrollTop; });
    return { open: open, scrolled: scrolled };
  }

  function restoreView(kept) {
    Array.prototype.forEach.call(document.querySelectorAll("details[data-key]"), function (d) {
      if (kept.open[d.getAttribute("data-key")]) d.open = true;
    });
    Array.prototype.forEach.call(document.querySelectorAll(".scroll"), function (n, i) {
      if (kept.scrolled[i]) n.scrollTop = kept.scrolled[i];
    });
  }

  var currentGrid = null;

  function card(id, title, caption) {
    // Attached at once: a chart sizes itself from its card's width, which a detached node lacks.
    var section = el("section", { class: "card", id: id });
    if (currentGrid) currentGrid.appendChild(section);
    section.appendChild(el("h2", { text: title }));
    if (caption) section.appendChild(el("p", { class: "caption", text: caption }));
    return section;
  }

  // -- charts --------------------------------------------------------------------------------

  var COLORS = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2"];

  function chartWidth(node) {
    var style = window.getComputedStyle(node);
    var w = (node.clientWidth || 600) - (parseFloat(style.paddingLeft) || 0) - (parseFloat(style.paddingRight) || 0);
    return Math.max(240, Math.min(w, 1200));
  }

  function plot(name, holder, opts, data) {
    // Recreated on each refresh: data and marks change together, and uPlot is fast at this size.
    var old = state.charts[name];
    if (old) old.destroy();
    var chartHolder = el("div", { class: "chart", "data-chart": name, role: "img" });
    var heading = holder.querySelector("h2");
    chartHolder.setAttribute("aria-label", (heading ? heading.textContent : name) + " chart; its numbers are beside it and in the data table below");
    holder.appendChild(chartHolder);
    opts.width = chartWidth(holder);
    opts.height = opts.height || 220;
    opts.legend = { live: false };
    var chart = new window.uPlot(opts, data, chartHolder);
    state.charts[name] = chart;
    return chart;
  }

  function verticalMarks(marks) {
    // marks: [{x, label, color}] drawn as dashed vertical lines with a label on top.
    return {
      hooks: {
        draw: [function (u) {
          var ctx = u.ctx;
          ctx.save();
          marks.forEach(function (mark) {
            if (mark.x === null || mark.x === undefined || !isFinite(mark.x)) return;
            var x = u.valToPos(mark.x, "x", true);
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) return;
            ctx.strokeStyle = mark.color;
            ctx.fillStyle = mark.color;
            ctx.setLineDash([5, 4]);
            ctx.lineWidth = 1.5 * devicePixelRatio;
            ctx.beginPath();
            ctx.moveTo(x, u.bbox.top);
            ctx.lineTo(x, u.bbox.top + u.bbox.height);
            ctx.stroke();
            ctx.font = (11 * devicePixelRatio) + "px sans-serif";
            ctx.fillText(mark.label, x + 3 * devicePixelRatio, u.bbox.top + (12 + 12 * (mark.row || 0)) * devicePixelRatio);
          });
          ctx.restore();
        }],
      },
    };
  }

  function timeSeriesChart(name, holder, timeline, keys, labels, extra) {
    var data = [timeline.t.slice()];
    var series = [{}];
    keys.forEach(function (key, i) {
      data.push(timeline.series[key].slice());
      var stroke = (extra && extra.strokes && extra.strokes[i]) || COLORS[i % COLORS.length];
      series.push({ label: labels[i], stroke: stroke, width: (extra && extra.widths && extra.widths[i]) || 2, spanGaps: false });
    });
    var opts = { title: extra && extra.title, series: series, axes: [{}, { size: 60 }], scales: { x: { time: true } } };
    if (extra && extra.plugins) opts.plugins = extra.plugins;
    return plot(name, holder, opts, data);
  }

  // -- sections ------------------------------------------------------------------------------

  function header(body, timeline) {
    var drain = body.drain || {};
    var acc = body.accounting || {};
    var box = el("header", { class: "run-header" });
    var title = el("h1", null, el("span", { class: "muted", text: "Run " }), el("span", { id: "run-id", text: body.run_id }));
    box.appendChild(title);
    var badge = el("span", { class: "badge badge-" + body.status, id: "run-status", text: body.status });
    box.appendChild(badge);
    var pairs = [];
    if (body.source !== "batch") {
      pairs.push(["started", clock(body.started_at)]);
      pairs.push(["ended", body.ended_at ? clock(body.ended_at) : "still running"]);
      pairs.push(["budget", body.budget_s === null ? "none" : duration(body.budget_s), body.budget_s, "budget_s"]);
      pairs.push(["time left", drain.seconds_left === undefined ? "no budget" : duration(drain.seconds_left), drain.seconds_left, "seconds_left"]);
      pairs.push(["drain margin", duration(drain.drain_margin), drain.drain_margin, "drain_margin"]);
      pairs.push(["start a task now?", drain.start_now === undefined ? "no budget" : (drain.start_now ? "yes" : "no")]);
      pairs.push(["succeeded", fmt(acc.succeeded) + (acc.expected ? " of " + fmt(acc.expected) : ""), acc.succeeded, "succeeded"]);
      pairs.push(["failed", fmt(acc.failed), acc.failed, "failed"]);
      pairs.push(["drained", fmt(acc.drained), acc.drained, "drained"]);
      pairs.push(["pending", fmt(acc.pending), acc.pending, "pending"]);
      pairs.push(["in flight", fmt((body.inflight || {}).count), (body.inflight || {}).count, "in_flight"]);
    } else {
      var v = body.health.verdicts;
      pairs.push(["rollouts checked", fmt(v.healthy + v.unhealthy + v.unobserved)]);
      pairs.push(["tasks", fmt(body.plan_tasks)]);
    }
    box.appendChild(facts(pairs, "header"));
    var live = document.body.getAttribute("data-mode") === "live";
    var note = body.source === "batch"
      ? "Batch health check (the files hold no timing: health and ng_perf only)"
      : (live ? "Live: refreshed every " + POLL_MS / 1000 + " s" : "Saved file: the sidecar's data") + " \u00b7 as of " + clock(body.as_of);
    box.appendChild(el("p", { class: "muted", id: "as-of", text: note }));
    if (timeline === null && body.source !== "batch") {
      box.appendChild(el("p", { class: "muted", text: "No timeline for this run (the over-time charts are empty)." }));
    }
    return box;
  }

  function throughputSection(body, timeline) {
    var s = card("throughput", "Rollouts per hour", "Completions per hour since the run started, at the end of each interval of the run's timeline.");
    var latency = body.latency || {};
    s.appendChild(facts([
      ["now", fmt(latency.completions_per_hour, 1) + " /h", latency.completions_per_hour, "completions_per_hour"],
      ["completed events", fmt((body.events || {}).completed), (body.events || {}).completed, "completed"],
    ], "throughput"));
    if (timeline) {
      var chart = timeSeriesChart("throughput", s, timeline, ["rollouts_per_hour"], ["rollouts/hour (per interval)"], { strokes: ["#93c5fd"], widths: [1] });
      chart.addSeries({ label: "moving average", stroke: "#1d4ed8", width: 2 }, 2);
      chart.setData(chart.data.concat([movingAverage(timeline.series.rollouts_per_hour)]));
      s.appendChild(details("Data table", timelineTable(timeline, ["rollouts_per_hour", "completed", "failed", "drained"], "throughput")));
    }
    return s;
  }

  function movingAverage(values) {
    // A trailing mean over ~1/40 of the points: per-interval rates are noisy at small buckets.
    var window = Math.max(1, Math.round(values.length / 40));
    var out = [], sum = 0, count = 0;
    for (var i = 0; i < values.length; i++) {
      if (values[i] !== null) { sum += values[i]; count += 1; }
      var old = i - window;
      if (old >= 0 && values[old] !== null) { sum -= values[old]; count -= 1; }
      out.push(count ? sum / count : null);
    }
    return out;
  }

  function timelineTable(timeline, keys, name) {
    // At most 60 rows (every k-th point and the last): a readable alternative, not a dump.
    var n = timeline.t.length;
    var step = Math.max(1, Math.ceil(n / 60));
    var rows = [];
    for (var i = 0; i < n; i += step) rows.push(i);
    if (n && rows[rows.length - 1] !== n - 1) rows.push(n - 1);
    return table(["time"].concat(keys), rows.map(function (i) {
      return [clock(timeline.t[i])].concat(keys.map(function (k) { return timeline.series[k][i]; }));
    }), name);
  }

  function latencySection(body) {
    var latency = body.latency;
    var hist = body.durations;
    if (!latency || !hist) return null;
    var s = card("latency", "Latency distribution", "Cumulative share of rollouts finished within each duration (log scale), completions and failures apart; p50/p75/p95 and the drain margin marked.");
    var q = latency.quantiles || {};
    s.appendChild(facts([
      ["p50", duration(q["0.5"]), q["0.5"], "p50"],
      ["p75", duration(q["0.75"]), q["0.75"], "p75"],
      ["p95", duration(q["0.95"]), q["0.95"], "p95"],
      ["p99", duration(q["0.99"]), q["0.99"], "p99"],
      ["max", duration(q["1.0"]), q["1.0"], "max"],
      ["drain margin", duration(latency.drain_margin), latency.drain_margin, "drain_margin"],
      ["samples", fmt(latency.samples), latency.samples, "samples"],
    ], "latency"));
    var bounds = hist.completed.bounds;
    var xs = bounds.concat([bounds[bounds.length - 1] * 2]);
    function cdf(counts) {
      var total = counts.reduce(function (a, b) { return a + b; }, 0);
      var run = 0;
      return counts.map(function (c) { run += c; return total ? run / total : null; });
    }
    // Drawn up to the bucket after the last one holding a duration (the +Inf bucket as twice
    // the last bound); every bucket stays in the table below.
    var last = 0;
    xs.forEach(function (x, i) { if (hist.completed.counts[i] || hist.failed.counts[i]) last = i; });
    var end = Math.min(xs.length, last + 2);
    var data = [xs.slice(0, end), cdf(hist.completed.counts).slice(0, end), cdf(hist.failed.counts).slice(0, end)];
    var marginIsP75 = latency.drain_margin !== null && latency.drain_margin === q["0.75"];
    var marks = [
      { x: q["0.5"], label: "p50", color: "#059669", row: 0 },
      { x: q["0.75"], label: marginIsP75 ? "p75 = drain margin" : "p75", color: "#d97706", row: 1 },
      { x: q["0.95"], label: "p95", color: "#7c3aed", row: 2 },
    ];
    if (!marginIsP75) marks.push({ x: latency.drain_margin, label: "drain margin", color: "#111827", row: 3 });
    plot("latency", s, {
      series: [{ label: "seconds" },
        { label: "completed (cum. share)", stroke: COLORS[0], width: 2 },
        { label: "failed (cum. share)", stroke: COLORS[1], width: 2 }],
      scales: { x: { time: false, distr: 3 }, y: { range: [0, 1] } },
      axes: [{ label: "seconds (bucket upper bound; last: +Inf)" }, { size: 50 }],
      plugins: [verticalMarks(marks)],
    }, data);
    s.appendChild(details("Data table", table(["\u2264 seconds", "completed", "failed"], bounds.concat(["+Inf"]).map(function (b, i) {
      return [b, hist.completed.counts[i], hist.failed.counts[i]];
    }), "latency")));
    return s;
  }

  function pointlessAt(timeline) {
    var m = timeline.series.drain_margin_s, left = timeline.series.seconds_left;
    for (var i = 0; i < timeline.t.length; i++) {
      if (left[i] !== null && (left[i] <= 0 || (m[i] !== null && left[i] < m[i]))) return timeline.t[i];
    }
    return null;
  }

  function drainSection(body, timeline) {
    var s = card("drain", "Drain margin against time left", "Time left in the dispatch budget and the drain margin; once time left falls below the margin, starting a task is pointless (marked).");
    var drain = body.drain || {};
    var at = timeline ? pointlessAt(timeline) : null;
    s.appendChild(facts([
      ["drain margin", duration(drain.drain_margin), drain.drain_margin, "drain_margin"],
      ["time left", drain.seconds_left === undefined ? "no budget" : duration(drain.seconds_left), drain.seconds_left, "seconds_left"],
      ["pointless from", at !== null ? clock(at) : (drain.seconds_left === undefined ? "no budget" : "not (yet)"), at === null ? "" : at, "pointless_at"],
    ], "drain"));
    if (timeline) {
      timeSeriesChart("drain", s, timeline, ["seconds_left", "drain_margin_s"], ["time left (s)", "drain margin (s)"], {
        plugins: [verticalMarks([{ x: at, label: "starting a task pointless", color: "#dc2626" }])],
      });
      s.appendChild(details("Data table", timelineTable(timeline, ["seconds_left", "drain_margin_s"], "drain")));
    }
    return s;
  }

  function inflightSection(body, timeline) {
    var s = card("inflight", "In flight and stragglers", "Rollouts started but not finished, and those running longer than the straggler threshold; below, the oldest still running.");
    var inflight = body.inflight || { count: 0, oldest: [] };
    s.appendChild(facts([
      ["in flight", fmt(inflight.count), inflight.count, "count"],
      ["stragglers", fmt(inflight.stragglers), inflight.stragglers, "stragglers"],
      ["oldest age", duration(inflight.oldest_age_s), inflight.oldest_age_s, "oldest_age_s"],
    ], "inflight"));
    if (timeline) {
      timeSeriesChart("inflight", s, timeline, ["in_flight", "stragglers"], ["in flight", "stragglers"]);
      s.appendChild(details("Data table", timelineTable(timeline, ["in_flight", "stragglers", "started"], "inflight-series")));
    }
    var oldest = inflight.oldest || [];
    s.appendChild(el("h3", { text: "Oldest still running" + (body.status === "ended" ? " at the end" : "") }));
    s.appendChild(oldest.length ? table(["task", "rollout", "attempt", "age", "straggling"], oldest.map(function (o) {
      return [o.task_index, o.rollout_index, o.attempt, duration(o.age_s), o.straggling ? "yes" : "no"];
    }), "oldest") : el("p", { class: "muted", text: "none" }));
    return s;
  }

  function checkLink(check) {
    var a = el("a", { href: "#check-" + check, class: "check", text: check });
    return a;
  }

  function barTable(name, labelHeader, rows, valueHeader) {
    // rows: [label(Node|string), value]; bars are sized with the CSSOM (style-src stays 'self').
    var max = rows.reduce(function (m, r) { return Math.max(m, r[1] || 0); }, 0);
    return table([labelHeader, valueHeader, ""], rows.map(function (r) {
      var bar = el("span", { class: "bar" });
      bar.style.width = (max ? (100 * (r[1] || 0) / max) : 0) + "%";
      return [r[0], r[1], el("span", { class: "bar-track" }, bar)];
    }), name);
  }

  function healthSection(body, timeline) {
    var s = card("health", "Health", "Verdicts so far, findings per check, and the unhealthy rollouts with the checks that fired (each linked to its explanation below).");
    var h = body.health;
    s.appendChild(facts([
      ["healthy", fmt(h.verdicts.healthy), h.verdicts.healthy, "healthy"],
      ["unhealthy", fmt(h.verdicts.unhealthy), h.verdicts.unhealthy, "unhealthy"],
      ["unobserved", fmt(h.verdicts.unobserved), h.verdicts.unobserved, "unobserved"],
      ["tasks closed", fmt(h.tasks_closed), h.tasks_closed, "tasks_closed"],
    ], "health"));
    if (timeline) {
      timeSeriesChart("verdicts", s, timeline, ["healthy", "unhealthy"], ["healthy (so far)", "unhealthy (so far)"]);
      s.appendChild(details("Data table", timelineTable(timeline, ["healthy", "unhealthy"], "verdicts")));
    }
    s.appendChild(el("h3", { text: "Findings per check" }));
    var checks = Object.keys(h.issues);
    s.appendChild(barTable("issues", "check", checks.map(function (c) { return [checkLink(c), h.issues[c]]; }), "findings"));
    var which = h.unhealthy_order === "latest" ? "latest " : "first ";
    s.appendChild(el("h3", { text: "Unhealthy rollouts" + (h.unhealthy_total > h.unhealthy.length ? " (" + which + h.unhealthy.length + " of " + fmt(h.unhealthy_total) + (which === "latest " ? ", newest first" : "") + ")" : "") }));
    if (!h.unhealthy.length) {
      s.appendChild(el("p", { class: "muted", text: "none" }));
    } else {
      s.appendChild(el("div", { class: "scroll" }, table(["task", "rollout", "checks fired", "details"], h.unhealthy.map(function (row) {
        var fired = el("span", null);
        var det = el("ul", { class: "details" });
        row.findings.forEach(function (f, i) {
          if (i) fired.appendChild(document.createTextNode(", "));
          fired.appendChild(checkLink(f.check));
          det.appendChild(el("li", null, el("code", { text: f.check }), ": ", el("span", { class: "detail", text: f.detail })));
        });
        return [row.task_index === null ? "\u2013" : String(row.task_index), row.rollout_index === null ? "\u2013" : String(row.rollout_index), fired, det];
      }), "unhealthy")));
    }
    return s;
  }

  function coverageSection(body) {
    var acc = body.accounting;
    if (!acc) return null;
    var s = card("coverage", "Coverage and failures", "Each planned rollout counted once by its latest state; failures by class count every failed attempt.");
    var keys = ["expected", "succeeded", "failed", "drained", "missing", "pending", "unplanned"];
    s.appendChild(barTable("coverage", "rollouts", keys.map(function (k) { return [k, acc[k]]; }), "count"));
    s.appendChild(el("h3", { text: "Failures by class" }));
    var failed = (body.events || {}).failed || [];
    s.appendChild(failed.length ? barTable("failures", "class", failed.map(function (f) {
      return [f.failure_class + (f.terminal ? " (terminal)" : " (retryable)"), f.count];
    }), "attempts") : el("p", { class: "muted", text: "none" }));
    return s;
  }

  function valueCell(value, text) {
    // The shown text, and the exact value for a reader (or a test) in data-value; a number
    // stays on one line.
    var node = el("span", { text: text, "data-value": value === null || value === undefined ? "null" : String(value) });
    if (typeof value === "number") node.setAttribute("class", "num");
    return node;
  }

  function barCell(value, max, text, color) {
    var bar = el("span", { class: "bar" });
    bar.style.width = (max && value ? (100 * value / max) : 0) + "%";
    if (color) bar.style.background = color;
    return el("span", null, valueCell(value, text), el("span", { class: "bar-track" }, bar));
  }

  function agentsChart(s, agents, rateKey, rateLabel) {
    // Throughput (left axis) and p95 latency (right axis) as bars side by side, one group per
    // agent; agent names are drawn on the canvas as text (never parsed as HTML).
    var bars = window.uPlot.paths && window.uPlot.paths.bars;
    if (!bars) return;
    var names = agents.map(function (a) { return a.agent; });
    var xs = agents.map(function (a, i) { return i; });
    function label(u, splits) {
      // as many characters as an agent's share of the width holds (~8 px each), then an ellipsis
      var room = Math.max(3, Math.floor(u.bbox.width / devicePixelRatio / names.length / 8) - 1);
      return splits.map(function (v) {
        var name = Number.isInteger(v) ? names[v] : undefined;
        return name === undefined ? "" : (name.length > room ? name.slice(0, room - 1) + "\u2026" : name);
      });
    }
    plot("agents", s, {
      series: [{ label: "agent" },
        { label: rateLabel, stroke: COLORS[0], fill: COLORS[0] + "99", width: 1, scale: "rate", paths: bars({ size: [0.35, 60], align: -1 }), points: { show: false } },
        { label: "p95 latency (s)", stroke: COLORS[4], fill: COLORS[4] + "99", width: 1, scale: "s", paths: bars({ size: [0.35, 60], align: 1 }), points: { show: false } }],
      scales: { x: { time: false, range: [-0.6, agents.length - 0.4] }, rate: { range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.1 : 1]; } }, s: { range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.1 : 1]; } } },
      axes: [{ values: label, splits: function () { return xs; }, grid: { show: false } },
        { scale: "rate", label: rateLabel, size: 60 },
        { scale: "s", side: 1, label: "p95 latency (s)", size: 60, grid: { show: false } }],
    }, [xs, agents.map(function (a) { return a[rateKey]; }), agents.map(function (a) { return a.latency_p95_s; })]);
  }

  function agentsSection(body) {
    var live = body.source !== "batch";
    var s = card("agents", "Per agent", live
      ? "Each agent's throughput (rollouts per hour over the run so far) beside its latency (p50 and p95, estimated from fixed buckets) and failures, to see an imbalance; rows naming an agent_ref."
      : "Each agent's rollouts beside its latency (p50 and p95 of the rows' ng_perf.total_latency_ms, from fixed buckets), to see an imbalance; the files hold no failures and no run time.");
    var agents = body.agents;
    if (!agents || !agents.length) {
      s.appendChild(el("p", { class: "muted", text: "No row of this run names its agent (agent_ref)." }));
      return s;
    }
    var rateKey = live ? "rollouts_per_hour" : "rollouts";
    var rateLabel = live ? "rollouts/h" : "rollouts";
    agentsChart(s, agents, rateKey, rateLabel);
    function most(key) { return agents.reduce(function (m, a) { return Math.max(m, a[key] || 0); }, 0); }
    var maxRate = most(rateKey), maxP95 = most("latency_p95_s"), maxFailed = most("failed");
    var headers = ["agent", rateLabel, "p50", "p95", "failed"];
    s.appendChild(table(headers, agents.map(function (a) {
      return [
        valueCell(a.agent, a.agent),
        barCell(a[rateKey], maxRate, fmt(a[rateKey], 1)),
        valueCell(a.latency_p50_s, duration(a.latency_p50_s)),
        barCell(a.latency_p95_s, maxP95, duration(a.latency_p95_s), COLORS[4]),
        a.failed === null ? valueCell(null, "\u2013") : barCell(a.failed, maxFailed, fmt(a.failed), COLORS[1]),
      ];
    }), "agents"));
    var keys = ["rollouts", "failed", "rollouts_per_hour", "latency_samples", "latency_p50_s", "latency_p95_s", "num_turns", "num_tool_calls", "prompt_tokens", "completion_tokens"];
    s.appendChild(details("All per-agent figures", table(["agent"].concat(keys), agents.map(function (a) {
      return [valueCell(a.agent, a.agent)].concat(keys.map(function (k) { return valueCell(a[k], fmt(a[k])); }));
    }), "agents-totals")));
    if (agents.some(function (a) { return a.other; })) {
      s.appendChild(el("p", { class: "muted", text: "Agents past the first " + (agents.length - 1) + " are counted together under \u201c(other agents)\u201d." }));
    }
    return s;
  }

  var PERF_FACTS = [
    ["total_prompt_tokens", "prompt tokens"], ["total_completion_tokens", "completion tokens"],
    ["total_reasoning_tokens", "reasoning tokens"], ["mean_num_turns", "turns per rollout (mean)"],
    ["max_num_turns", "turns (max)"], ["total_latency_p50_ms", "model-call latency p50 (ms)"],
    ["total_latency_p90_ms", "latency p90 (ms)"], ["total_latency_p99_ms", "latency p99 (ms)"],
    ["overall_observability_coverage", "rows with ng_perf"],
  ];

  function perfSection(body) {
    var s = card("perf", "ng_perf totals", "Tokens, turns and model-call latency over the rollouts the health check saw (NeMo Gym's perf summary" + (body.perf_rollouts !== undefined ? ", over " + fmt(body.perf_rollouts) + " rollouts" : "") + "; token sums are live).");
    var p = body.perf_summary;
    var t = body.tokens || {};
    var rows = Object.keys(t).map(function (k) { return [k + " tokens (sum)", t[k]]; });
    if (p) {
      Object.keys(p).forEach(function (k) { rows.push([k, p[k]]); });
      s.appendChild(facts(PERF_FACTS.filter(function (f) { return p[f[0]] !== undefined; }).map(function (f) {
        return [f[1], fmt(p[f[0]], 2), p[f[0]], f[0]];
      }), "perf"));
    }
    if (body.perf_pending) {
      s.appendChild(el("p", { class: "muted", text: p ? "Being brought up to date\u2026" : "Being computed (a big run's summary takes a few seconds)\u2026" }));
    }
    if (!rows.length) {
      s.appendChild(el("p", { class: "muted", text: "No ng_perf data yet." }));
      return s;
    }
    s.appendChild(details("All " + rows.length + " figures", table(["measure", "value"], rows, "perf")));
    return s;
  }

  // -- page assembly -------------------------------------------------------------------------

  function renderRun(body, timeline) {
    if (!body || body.schema !== 1) throw new Error("unknown page body");
    Object.keys(state.charts).forEach(function (k) { state.charts[k].destroy(); });
    state.charts = {};
    var kept = keptView();
    var app = document.getElementById("app");
    app.style.minHeight = app.offsetHeight + "px";
    clear(app);
    app.appendChild(header(body, timeline));
    var grid = el("div", { class: "grid" });
    app.appendChild(grid);
    currentGrid = grid;
    try {
      if (body.source === "batch") {
        healthSection(body, null); agentsSection(body); perfSection(body);
      } else {
        throughputSection(body, timeline); latencySection(body); drainSection(body, timeline);
        inflightSection(body, timeline); healthSection(body, timeline); coverageSection(body);
        agentsSection(body); perfSection(body);
      }
    } finally {
      currentGrid = null;
      app.style.minHeight = "";
    }
    restoreView(kept);
    document.title = "Run " + body.run_id + " \u00b7 rollout-sidecar";
  }

  function getJSON(url) {
    return fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" }).then(function (r) {
      if (r.status === 404) return { missing: true, status: r.status };
      if (!r.ok) throw new Error(url + " answered " + r.status);
      return r.json().then(function (data) { return { data: data }; });
    });
  }

  function showError(message) {
    var node = document.getElementById("error");
    if (node) node.textContent = message || "";
  }

  function pollRun(runId) {
    var base = "/v1/runs/" + encodeURIComponent(runId);
    function once() {
      return Promise.all([getJSON(base + "/page"), getJSON(base + "/timeline")]).then(function (answers) {
        if (answers[0].missing) { showError("The sidecar does not know this run (any more)."); return; }
        state.body = answers[0].data;
        state.timeline = answers[1].missing ? null : answers[1].data;
        renderRun(state.body, state.timeline);
        state.refreshes += 1;
        showError("");
      }).catch(function (err) {
        state.errors += 1;
        state.lastError = String(err);
        showError("Refresh failed (" + String(err) + "); retrying.");
      });
    }
    function loop() {
      once().then(function () {
        if (!state.body || state.body.status !== "ended") setTimeout(loop, POLL_MS);
        else setTimeout(loop, POLL_MS * 5);
      });
    }
    loop();
  }

  function renderIndex(runs) {
    var app = clear(document.getElementById("app"));
    app.appendChild(el("header", { class: "run-header" }, el("h1", { text: "Runs" })));
    var list = runs.runs || [];
    if (!list.length) {
      app.appendChild(el("p", { class: "muted", text: "No runs yet. A dispatcher's run_started event creates one." }));
      return;
    }
    app.appendChild(table(["run", "status", "completed"], list.map(function (r) {
      return [el("a", { href: "/runs/" + encodeURIComponent(r.run_id), text: r.run_id }), r.ended ? "ended" : "running", r.completed];
    }), "runs"));
  }

  function pollIndex() {
    function loop() {
      getJSON("/v1/runs").then(function (answer) {
        if (answer.data) renderIndex(answer.data);
        state.refreshes += 1;
        showError("");
      }).catch(function (err) {
        state.errors += 1;
        showError("Refresh failed (" + String(err) + "); retrying.");
      }).then(function () { setTimeout(loop, POLL_MS); });
    }
    loop();
  }

  function start() {
    var mode = document.body.getAttribute("data-mode");
    if (mode === "index") return pollIndex();
    if (mode === "live") return pollRun(document.body.getAttribute("data-run-id"));
    var embedded = JSON.parse(document.getElementById("page-data").textContent);
    state.body = embedded.page;
    state.timeline = embedded.timeline;
    renderRun(state.body, state.timeline);
    state.refreshes += 1;
  }

  var resizeTimer = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(function () { if (state.body) renderRun(state.body, state.timeline); }, 200);
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
