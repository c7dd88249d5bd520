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
  var state = { body: null, timeline: null, writtenAt: null, charts: {}, refreshes: 0, renders: 0, errors: 0, lastError: null };
  var NO_TIMING = "no timing: these rows arrived together, their files hold no completion times";
  window.sidecarPage = state;

  // -- DOM helpers (text only) ---------------------------------------------------------------

  function el(tag, attrs) {
    var node = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (key) {
      if (key === "text") node.textContent = attrs[key];
      else node.setAttribute(key, attrs[key]);
    });
    Array.prototype.slice.call(arguments, 2).forEach(function (child) {
      if (child !== null && child !== undefined) node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
    });
    return node;
  }

  function clear(node) {
    node.replaceChildren();
    return node;
  }

  function fmt(value, digits) {
    if (value === null || value === undefined) return "\u2013";
    if (typeof value !== "number") return String(value);
    if (!isFinite(value)) return String(value);
    if (Number.isInteger(value)) return value.toLocaleString("en-US");
    return value.toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 2 : digits });
  }

  function compact(value) {
    // An axis tick of a few characters at any magnitude: 0.25, 950, 12.3K, 1.2M.
    return typeof value === "number" ? value.toLocaleString("en-US", { notation: "compact", maximumSignificantDigits: 3 }) : "";
  }

  function duration(seconds) {
    if (seconds === null || seconds === undefined) return "\u2013";
    var sign = seconds < 0 ? "\u2212" : "";
    var s = Math.abs(seconds);
    if (s < 120) return sign + fmt(s, 1) + " s";
    if (s < 7200) return sign + fmt(s / 60, 1) + " min";
    return sign + fmt(s / 3600, 2) + " h";
  }

  function hoursMinutes(seconds) {  // "4 h 40 min": a sentence reads better than "4.67 h"
    var minutes = Math.round(seconds / 60);
    return minutes < 60 ? minutes + " min" : Math.floor(minutes / 60) + " h " + (minutes % 60) + " min";
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
        var td = cell instanceof Node ? el("td", null, cell) : el("td", { text: fmt(cell) });
        if (!(cell instanceof Node) && td.textContent.length <= 10) td.className = "num";  // "7 min" on one line
        tr.appendChild(td);
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
      // [label, shown text, exact value, key, what it counts (a caption under it)]
      var dd = el("dd", { text: pair[1] });
      if (pair[2] !== undefined) dd.setAttribute("data-value", String(pair[2]));
      if (pair[3]) dd.setAttribute("data-key", pair[3]);
      dl.appendChild(el("div", null, el("dt", { text: pair[0] }), dd, pair[4] ? el("dd", { class: "note", text: pair[4] }) : null));
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

  function axisSize(u, values, index, cycle) {
    // As wide as the axis's longest tick label (never a fixed guess that cuts big numbers).
    var axis = u.axes[index];
    if (cycle > 1) return axis._size;
    var size = axis.ticks.size + axis.gap;
    var longest = (values || []).reduce(function (a, v) { return String(v).length > a.length ? String(v) : a; }, "");
    if (longest) {
      u.ctx.font = axis.font[0];
      size += u.ctx.measureText(longest).width / devicePixelRatio;
    }
    return Math.ceil(size) + 2;
  }

  function yAxis(extra) {
    var axis = { size: axisSize, values: function (u, splits) { return splits.map(compact); } };
    Object.keys(extra || {}).forEach(function (k) { axis[k] = extra[k]; });
    return axis;
  }

  function plot(name, holder, opts, data) {
    // Recreated on each refresh (renderRun destroys the old ones): data and marks change together,
    // and uPlot is fast at this size.
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
            ctx.strokeStyle = ctx.fillStyle = mark.color;
            ctx.setLineDash([5, 4]);
            ctx.lineWidth = 1.5 * devicePixelRatio;
            ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
            ctx.font = (11 * devicePixelRatio) + "px sans-serif";
            // beside the line, on whichever side has room for it
            var room = u.bbox.left + u.bbox.width - x > ctx.measureText(mark.label).width + 4 * devicePixelRatio;
            ctx.textAlign = room ? "left" : "right";
            ctx.fillText(mark.label, x + (room ? 3 : -3) * devicePixelRatio, u.bbox.top + (12 + 12 * (mark.row || 0)) * devicePixelRatio);
          });
          ctx.restore();
        }],
      },
    };
  }

  function timeSeriesChart(name, holder, timeline, keys, labels, extra, tableKeys) {
    // The chart, then its numbers as a data table (tableKeys, else the charted keys).
    var data = [timeline.t.slice()];
    var series = [{}];
    keys.forEach(function (key, i) {
      data.push(extra && extra.map ? timeline.series[key].map(extra.map) : timeline.series[key].slice());
      var one = { label: labels[i], stroke: COLORS[i % COLORS.length], width: 2, spanGaps: false };
      var points = extra && extra.points && extra.points[i];
      if (points) { one.points = points; one.paths = function () { return null; }; one.stroke = points.stroke; }
      series.push(one);
    });
    var opts = { series: series, axes: [{ space: 70 }, yAxis()], scales: { x: { time: true }, y: (extra && extra.scale) || {} } };
    if (extra && extra.plugins) opts.plugins = extra.plugins;
    var chart = plot(name, holder, opts, data);
    holder.appendChild(details("Data table", timelineTable(timeline, tableKeys || keys, name)));
    return chart;
  }

  // -- sections ------------------------------------------------------------------------------

  function header(body) {
    var drain = body.drain || {};
    var acc = body.accounting || {};
    var box = el("header", { class: "run-header" });
    box.appendChild(el("h1", null, el("span", { class: "muted", text: "Run " }), el("span", { id: "run-id", text: body.run_id })));
    var reason = body.health.unobserved_reason;
    var checked = body.status === "checked" && reason ? "not checked" : body.status;  // a batch run nothing could check
    box.appendChild(el("span", { class: "badge badge-" + checked.replace(" ", "-"), id: "run-status", text: checked }));
    if (reason) box.appendChild(el("p", { class: "warn", id: "not-checked", text: "Not checked: " + reason + "." }));
    var v = body.health.verdicts, inflight = body.inflight || {};
    var pairs = body.source === "batch" ? [["rows read", fmt(v.healthy + v.unhealthy + v.unobserved)], ["tasks", fmt(body.plan_tasks)]] : [
      ["started", clock(body.started_at)],
      ["ended", body.ended_at ? clock(body.ended_at) : "still running"],
      ["budget", body.budget_s === null ? "none" : duration(body.budget_s), body.budget_s, "budget_s"],
      ["time left", drain.seconds_left === undefined ? "no budget" : duration(drain.seconds_left), drain.seconds_left, "seconds_left"],
      ["drain margin", duration(drain.drain_margin), drain.drain_margin, "drain_margin"],
      ["start a task now?", drain.start_now === undefined ? "no budget" : (drain.start_now ? "yes" : "no")],
      ["succeeded", fmt(acc.succeeded) + (acc.expected ? " of " + fmt(acc.expected) : ""), acc.succeeded, "succeeded", "rollouts, each once"],
    ].concat(["failed", "drained", "pending"].map(function (k) { return [k, fmt(acc[k]), acc[k], k]; }), [
      ["in flight", fmt(inflight.count), inflight.count, "in_flight"]]);
    var line = forecastLine(body);
    if (line) box.appendChild(el("p", { class: "forecast", id: "forecast-line", text: line }));
    box.appendChild(facts(pairs, "header"));
    var live = document.body.getAttribute("data-mode") === "live";
    var note = body.source === "batch"
      ? "Batch health check (the files hold no timing: health and ng_perf only)"
      : (live ? "Live: refreshed every " + POLL_MS / 1000 + " s \u00b7 as of " + clock(body.as_of) : "Saved file of the sidecar's data");
    if (state.writtenAt) note += ", written " + clock(state.writtenAt);
    box.appendChild(el("p", { class: "muted", id: "as-of", text: note }));
    return box;
  }

  function timed(timeline) {
    return timeline && timeline.t.length > 0;
  }

  function untimed(s, timeline) {
    // Where a chart over time would be: a note that the run has no times, and true.
    if (!timed(timeline)) s.appendChild(el("p", { class: "muted notiming", text: NO_TIMING }));
    return !timed(timeline);
  }

  function throughputSection(body, timeline) {
    var s = card("throughput", "Rollouts per hour", "Completions per hour by when each ended: its row's own time, else the dispatcher's.");
    var latency = body.latency || {};
    var events = body.events || {};
    s.appendChild(facts([
      ["over the run", latency.completions_per_hour === null ? "no timing" : fmt(latency.completions_per_hour, 1) + " /h", latency.completions_per_hour, "completions_per_hour", "from its start to its latest time"],
      ["completions", fmt(events.completed), events.completed, "completed", "events: retries, failure rows too"],
    ], "throughput"));
    if (untimed(s, timeline)) return s;
    var placed = timeline.series.completed.reduce(function (a, b) { return a + b; }, 0);
    if (placed < events.completed) {
      s.appendChild(el("p", { class: "caption", text: fmt(events.completed - placed) + " of " + fmt(events.completed) + " completions have no time; the rates count the other " + fmt(placed) + "." }));
    }
    // The line is the rate over a trailing window; single intervals are dots, those above the
    // axis (fitted to the line) left out. Rates over more than two orders of magnitude: a log axis.
    var trailing = windowRate(timeline);
    var shown = trailing.filter(function (v) { return v !== null && v > 0; });
    var top = Math.max.apply(null, shown.concat([0]));
    var log = shown.length > 0 && top / Math.min.apply(null, shown) >= 100;
    var positive = function (v) { return v !== null && v > 0 ? v : null; };
    s.appendChild(el("p", { class: "caption", text: "Dots: each interval of " + duration(timeline.bucket_s) + "; line: the rate over the last " + duration(windowWidth(timeline) * timeline.bucket_s) + (log ? " (log scale: the rates span " + Math.floor(Math.log10(top / Math.min.apply(null, shown))) + " orders of magnitude)." : "; dots above the axis are off it.") }));
    var chart = timeSeriesChart("throughput", s, timeline, ["rollouts_per_hour"], ["each interval"], {
      map: log ? positive : null,
      points: [{ show: true, size: 3, fill: "#93c5fd", stroke: "#60a5fa" }],
      scale: log ? { distr: 3, log: 10 } : { range: function (u, lo, hi) { return [0, top > 0 ? top * 1.5 : Math.max(hi, 1)]; } },
    }, ["rollouts_per_hour", "completed", "failed", "drained"]);
    chart.addSeries({ label: "trailing window", stroke: "#1d4ed8", width: 2 }, 2);
    chart.setData(chart.data.concat([log ? trailing.map(positive) : trailing]));
    return s;
  }

  function windowWidth(timeline) {
    // Points in the trailing window: ~1/25 of the run, and room for ~10 completions on average.
    var n = timeline.t.length;
    var done = timeline.series.completed.reduce(function (a, b) { return a + b; }, 0);
    var wide = done ? Math.round(10 * n / done) : n;
    return Math.max(5, Math.min(Math.max(Math.round(n / 25), wide), Math.round(n / 3)));
  }

  function windowRate(timeline) {
    // Completions in a trailing window of ~1/25 of the points (at least 5) over the window's
    // length: a rate, unlike a mean of per-interval rates, that single short intervals cannot swing.
    var t = timeline.t, done = timeline.series.completed, n = t.length;
    var width = windowWidth(timeline);
    var times = [t[0] - timeline.bucket_s].concat(t), total = [0], out = [];
    for (var i = 0; i < n; i++) total.push(total[i] + done[i]);
    for (i = 0; i < n; i++) {
      var j = Math.max(0, i + 1 - width);
      var span = times[i + 1] - times[j];
      out.push(span > 0 ? (total[i + 1] - total[j]) * 3600 / span : null);
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
    s.appendChild(facts([["p50", "0.5"], ["p75", "0.75"], ["p95", "0.95"], ["p99", "0.99"], ["max", "1.0"]].map(function (p) {
      return [p[0], duration(q[p[1]]), q[p[1]], p[0]];
    }).concat([
      ["drain margin", duration(latency.drain_margin), latency.drain_margin, "drain_margin"],
      ["samples", fmt(latency.samples), latency.samples, "samples", "durations: completions, long failures"],
    ]), "latency"));
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
      axes: [{ label: "seconds (bucket upper bound; last: +Inf)", values: function (u, splits) { return splits.map(compact); } }, yAxis()],
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
    var s = card("drain", "Drain margin against time left", "Time left in the dispatch budget and the drain margin, on a log scale so the hours left and the minutes of margin both show (a spent budget ends its line); once time left falls below the margin, starting a task is pointless (marked).");
    var drain = body.drain || {};
    var at = timed(timeline) ? pointlessAt(timeline) : null;
    s.appendChild(facts([
      ["drain margin", duration(drain.drain_margin), drain.drain_margin, "drain_margin"],
      ["time left", drain.seconds_left === undefined ? "no budget" : duration(drain.seconds_left), drain.seconds_left, "seconds_left"],
      ["pointless from", at !== null ? clock(at) : (drain.seconds_left === undefined ? "no budget" : "not (yet)"), at === null ? "" : at, "pointless_at"],
    ], "drain"));
    if (untimed(s, timeline)) return s;
    timeSeriesChart("drain", s, timeline, ["seconds_left", "drain_margin_s"], ["time left (s)", "drain margin (s)"], {
      map: function (v) { return v !== null && v > 0 ? v : null; },  // a log axis has no 0: a spent budget ends the line
      scale: { distr: 3, log: 10 },
      plugins: [verticalMarks([{ x: at, label: "starting a task pointless", color: "#dc2626" }])],
    });
    return s;
  }

  function forecastLine(body) {
    // "at this pace 2,150-2,180 of 2,193 finish before the budget ends; 2,193 needs about 4 h 40 min"
    var f = body.forecast;
    if (!f || f.planned === null) return null;
    if (!f.eta_all_s) return "Forecast: " + f.basis.reason + ".";
    var needs = fmt(f.planned) + " needs about " + hoursMinutes(f.as_of - body.started_at + f.eta_all_s.p50);
    var end = f.by_budget_end;
    if (!end) return "At this pace " + needs + ".";
    var band = end.finished.p10 === end.finished.p90 ? fmt(end.finished.p50) : fmt(end.finished.p10) + "\u2013" + fmt(end.finished.p90);
    return "At this pace " + band + " of " + fmt(f.planned) + " finish before the budget ends; " + needs + ".";
  }

  function forecastSection(body) {
    var s = card("forecast", "Finished by the budget's end (forecast)", "The forecast's p10\u2013p90 band of rollouts finished when the dispatch budget ends, its p50, the planned total and those finished so far, at each recent forecast (docs/http-api.md).");
    var f = body.forecast;
    if (!f || !f.by_budget_end) {
      s.appendChild(el("p", { class: "muted", text: f ? "No forecast: " + f.basis.reason + "." : "No forecast yet." }));
      return s;
    }
    var end = f.by_budget_end;
    s.appendChild(facts([
      ["finished by the end", fmt(end.finished.p10) + "\u2013" + fmt(end.finished.p90) + " (p50 " + fmt(end.finished.p50) + ")", end.finished.p50, "finished_p50"],
      ["never started", fmt(end.drained.p50), end.drained.p50, "drained_p50"],
      ["in flight at the end", fmt(f.cut_off.p50), f.cut_off.p50, "cut_off_p50"],
      ["all done in", duration(f.eta_all_s.p50) + " (p90 " + duration(f.eta_all_s.p90) + ")", f.eta_all_s.p50, "eta_all_p50_s"],
      ["budget for all", duration(f.budget_for_all_s), f.budget_for_all_s, "budget_for_all_s"],
    ], "forecast"));
    var history = body.forecast_history || [];
    if (history.length) {
      var column = function (i) { return history.map(function (h) { return h[i]; }); };
      var data = [column(0), column(2), column(3), column(4), history.map(function () { return f.planned; }), column(1)];
      var series = [{}, { label: "p10", stroke: COLORS[0], width: 1 }, { label: "p50", stroke: COLORS[0], width: 2 },
        { label: "p90", stroke: COLORS[0], width: 1 }, { label: "planned", stroke: "#111827", width: 1, dash: [6, 4] },
        { label: "finished so far", stroke: COLORS[2], width: 2 }];
      plot("forecast", s, { series: series, bands: [{ series: [3, 1], fill: "rgba(37,99,235,0.15)" }],
        axes: [{ space: 70 }, yAxis()], scales: { x: { time: true }, y: {} } }, data);
      s.appendChild(details("Data table", table(["as of", "finished so far", "p10", "p50", "p90"], history.map(function (h) {
        return [clock(h[0]), h[1], h[2], h[3], h[4]];
      }), "forecast")));
    }
    return s;
  }

  function groupsSection(body) {
    var s = card("groups", "Task groups holding the run up", "Open tasks with a repeat still running, the longest waiting first: repeats finished and in flight, the spread of the finished repeats' durations (coefficient of variation) and the oldest repeat's age.");
    var groups = body.groups || [];
    s.appendChild(groups.length ? table(["task", "planned", "finished", "in flight", "duration CV", "oldest age"], groups.map(function (g) {
      return [g.task_index, fmt(g.planned), g.finished, g.in_flight, fmt(g.duration_cv), duration(g.oldest_age_s)];
    }), "groups") : el("p", { class: "muted", text: "none" }));
    return s;
  }

  function inflightSection(body, timeline) {
    var s = card("inflight", "In flight and stragglers", "Rollouts started but not finished, and those running longer than the straggler threshold; below, the oldest still running.");
    var inflight = body.inflight || { count: 0, oldest: [] };
    s.appendChild(facts([["in flight", fmt(inflight.count), inflight.count, "count"],
      ["stragglers", fmt(inflight.stragglers), inflight.stragglers, "stragglers"],
      ["oldest age", duration(inflight.oldest_age_s), inflight.oldest_age_s, "oldest_age_s"]], "inflight"));
    var started = timed(timeline) && timeline.series.started.some(function (n) { return n > 0; });
    if (timed(timeline) && !started) {
      s.appendChild(el("p", { class: "muted", text: "No rollout of this run reported its start (a started event), so none shows in flight." }));
    } else if (started) {
      timeSeriesChart("inflight", s, timeline, ["in_flight", "stragglers"], ["in flight", "stragglers"], null, ["in_flight", "stragglers", "started"]);
    }
    var oldest = inflight.oldest || [];
    s.appendChild(el("h3", { text: "Oldest still running" + (body.status === "ended" ? " at the end" : "") }));
    s.appendChild(oldest.length ? table(["task", "rollout", "attempt", "age", "straggling"], oldest.map(function (o) {
      return [o.task_index, o.rollout_index, o.attempt, duration(o.age_s), o.straggling ? "yes" : "no"];
    }), "oldest") : el("p", { class: "muted", text: "none" }));
    return s;
  }

  function checkLink(check) {
    return el("a", { href: "#check-" + check, class: "check", text: check });
  }

  function bar(value, max, color) {
    // A bar of value/max, sized with the CSSOM (style-src stays 'self').
    var inner = el("span", { class: "bar" });
    inner.style.width = (max && value ? (100 * value / max) : 0) + "%";
    if (color) inner.style.background = color;
    return el("span", { class: "bar-track" }, inner);
  }

  function barTable(name, headers, rows) {
    // rows: [label (Node|string), value, more cells...], then a bar for the value.
    var max = rows.reduce(function (m, r) { return Math.max(m, r[1] || 0); }, 0);
    return table(headers.concat([""]), rows.map(function (r) { return r.concat([bar(r[1], max)]); }), name);
  }

  function checkedOn(c) {
    // How much of the run a check could look at: its coverage (none for a live task check).
    if (!c) return "\u2013";
    if (c.ignored) return "ignored";
    var all = c.evaluated + c.unobserved;
    if (!c.evaluated) return all ? "not run: no evidence" : "\u2013";
    return c.unobserved ? fmt(c.evaluated) + " of " + fmt(all) : "all " + fmt(all);
  }

  function healthSection(body, timeline) {
    var s = card("health", "Health", "Verdicts so far, findings per check and how much of the run each check could look at, and the unhealthy rollouts with the checks that fired (each linked to its explanation below).");
    var h = body.health;
    var v = h.verdicts;
    var judged = v.healthy + v.unhealthy;
    function verdict(key) {  // zero of a verdict no row could get is "not checked", not a count
      return [key, h.unobserved_reason && !v[key] ? "not checked" : fmt(v[key]), v[key], key];
    }
    s.appendChild(facts([
      verdict("healthy"), verdict("unhealthy"),
      ["unobserved", fmt(v.unobserved), v.unobserved, "unobserved", h.unobserved_reason ? "only " + fmt(judged) + " of " + fmt(judged + v.unobserved) + " rows checked" : "rows a check could not look at"],
      ["tasks closed", fmt(h.tasks_closed), h.tasks_closed, "tasks_closed"],
    ], "health"));
    if (timed(timeline)) {
      timeSeriesChart("verdicts", s, timeline, ["healthy", "unhealthy"], ["healthy (so far)", "unhealthy (so far)"]);
    }
    s.appendChild(el("h3", { text: "Findings per check" }));
    var checks = Object.keys(h.issues);
    var coverage = h.coverage || {};
    s.appendChild(barTable("issues", ["check", "findings", "rows checked"], checks.map(function (c) {
      var on = checkedOn(coverage[c]);
      return [checkLink(c), h.issues[c], el("span", { class: on.indexOf("not run") === 0 ? "notrun" : "", text: on })];
    })));
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
    s.appendChild(barTable("coverage", ["rollouts", "count"], keys.map(function (k) { return [k, acc[k]]; })));
    s.appendChild(el("h3", { text: "Failures by class" }));
    var failed = (body.events || {}).failed || [];
    s.appendChild(failed.length ? barTable("failures", ["class", "attempts"], failed.map(function (f) {
      return [f.failure_class + (f.terminal ? " (terminal)" : " (retryable)"), f.count];
    })) : el("p", { class: "muted", text: "none" }));
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
    return el("span", null, valueCell(value, text), bar(value, max, color));
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
    function barSeries(label, color, scale, align) {
      return { label: label, stroke: color, fill: color + "99", width: 1, scale: scale, paths: bars({ size: [0.35, 60], align: align }), points: { show: false } };
    }
    function fromZero() { return { range: function (u, lo, hi) { return [0, hi > 0 ? hi * 1.1 : 1]; } }; }
    plot("agents", s, {
      series: [{ label: "agent" }, barSeries(rateLabel, COLORS[0], "rate", -1), barSeries("p95 latency (s)", COLORS[4], "s", 1)],
      scales: { x: { time: false, range: [-0.6, agents.length - 0.4] }, rate: fromZero(), s: fromZero() },
      axes: [{ values: label, splits: function () { return xs; }, grid: { show: false } },
        yAxis({ scale: "rate", label: rateLabel }),
        yAxis({ scale: "s", side: 1, label: "p95 latency (s)", grid: { show: false } })],
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
    var rated = agents.some(function (a) { return a.rollouts_per_hour !== null; });  // a run with no time has no rate
    var rateKey = rated ? "rollouts_per_hour" : "rollouts";
    var rateLabel = rated ? "rollouts/h" : "rollouts";
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
    app.appendChild(header(body));
    var grid = el("div", { class: "grid" });
    app.appendChild(grid);
    currentGrid = grid;
    try {
      if (body.source === "batch") {
        healthSection(body, null); agentsSection(body); perfSection(body);
      } else {
        throughputSection(body, timeline); latencySection(body); drainSection(body, timeline);
        forecastSection(body); inflightSection(body, timeline); groupsSection(body);
        healthSection(body, timeline); coverageSection(body);
        agentsSection(body); perfSection(body);
      }
    } finally {
      currentGrid = null;
      app.style.minHeight = "";
    }
    restoreView(kept);
    document.title = "Run " + body.run_id + " \u00b7 rollout-sidecar";
    state.renders += 1;
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

  function failed(err) {
    state.errors += 1;
    state.lastError = String(err);
    showError("Refresh failed (" + String(err) + "); retrying.");
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
      }).catch(failed);
    }
    function loop() {
      once().then(function () { setTimeout(loop, state.body && state.body.status === "ended" ? POLL_MS * 5 : POLL_MS); });
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
      }).catch(failed).then(function () { setTimeout(loop, POLL_MS); });
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
    state.writtenAt = embedded.written_at;
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
