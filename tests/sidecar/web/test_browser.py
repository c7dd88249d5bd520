"""The run page in a real browser (Debian's Chromium, headless, through Playwright).

One sidecar holds every case the page must tell the truth about, one browser opens them all:

- a finished run fed through ``follow --once`` whose rows carry no time (NeMo Gym's own
  example runs look so): no rate anywhere (page, ``/metrics``, timeline, tracker keys), the page
  says why where the charts would be, and "not checked" for its rows without ``ng_trajectory``;
- a live run with timing (the dispatcher's stamps and its rows' trajectories), hostile names;
- a run whose rows all lack ``ng_trajectory`` (live, ``report --html`` and ``health-check --html``);
- a run whose rates span four orders of magnitude, timed by its rows' own evidence alone.

Each is drawn at 390, 768 and 1280 px in one page load: no element leaves its card (measured
from the DOM), no text drawn on a chart leaves its canvas (every ``fillText`` recorded with its
measured box), and the numbers shown are ``/report``'s and ``/timeline``'s. Screenshots go to
``$ROLLOUT_SIDECAR_ARTIFACTS`` or a temporary directory.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import orjson
import pytest

from sidecar.cli import main as cli_main
from sidecar.export.trackers.keys import PREFIX, final_metrics, live_metrics
from sidecar.http.server import ServiceThread

from .support import (
    HOSTILE,
    SECOND_AGENT,
    T0,
    ManualClock,
    SidecarRun,
    artifacts_dir,
    chromium,
    run_events,
    sidecar,
    start_run,
)

pytestmark = pytest.mark.timeout(240)

READY = "window.sidecarPage && window.sidecarPage.refreshes > 0"
WIDTHS = (390, 768, 1280)
NO_TIMING = "no timing: these rows arrived together, their files hold no completion times"

#: Records every text drawn on a canvas (since its last full clear) with its box in canvas
#: pixels: uPlot draws ticks, labels and marks as canvas text, which the DOM cannot measure.
RECORD_CANVAS_TEXT = """
(() => {
  const drawn = new WeakMap();
  window.__drawnText = (canvas) => drawn.get(canvas) || [];
  const proto = CanvasRenderingContext2D.prototype;
  const fill = proto.fillText, clear = proto.clearRect;
  proto.clearRect = function (x, y, w, h) {
    if (x <= 0 && y <= 0 && w >= this.canvas.width && h >= this.canvas.height) drawn.set(this.canvas, []);
    return clear.apply(this, arguments);
  };
  proto.fillText = function (text, x, y) {
    const m = this.measureText(text), t = this.getTransform();
    const box = [[x - m.actualBoundingBoxLeft, y - m.actualBoundingBoxAscent],
                 [x + m.actualBoundingBoxRight, y + m.actualBoundingBoxDescent]];
    const corners = [[box[0][0], box[0][1]], [box[1][0], box[0][1]],
                     [box[0][0], box[1][1]], [box[1][0], box[1][1]]]
      .map(([px, py]) => [t.a * px + t.c * py + t.e, t.b * px + t.d * py + t.f]);
    const xs = corners.map(c => c[0]), ys = corners.map(c => c[1]);
    if (!drawn.has(this.canvas)) drawn.set(this.canvas, []);
    drawn.get(this.canvas).push({ text: String(text), x0: Math.min(...xs), x1: Math.max(...xs),
                                  y0: Math.min(...ys), y1: Math.max(...ys) });
    return fill.apply(this, arguments);
  };
})();
"""

#: Every element that leaves its card (or the header) sideways, and every chart text outside its
#: canvas; a box that scrolls or clips (or a closed ``<details>``) keeps what is inside it, so only
#: the box itself is measured.
LAYOUT = """
() => {
  const bad = [];
  for (const card of document.querySelectorAll('#app .card, #app .run-header')) {
    const box = card.getBoundingClientRect();
    const walk = (node) => {
      for (const child of node.children) {
        const style = getComputedStyle(child);
        const r = child.getBoundingClientRect();
        if (style.display === 'none' || !r.width) continue;
        if (r.left < box.left - 0.5 || r.right > box.right + 0.5) {
          const what = `<${child.tagName.toLowerCase()} class="${child.className}"> ` +
                       (child.textContent || '').slice(0, 40);
          bad.push(`${card.id || 'header'}: ${what} at ${r.left}..${r.right} of ${box.left}..${box.right}`);
        }
        if (style.overflowX === 'visible' && !(child.tagName === 'DETAILS' && !child.open)) walk(child);
      }
    };
    walk(card);
  }
  for (const holder of document.querySelectorAll('.chart[data-chart]')) {
    const canvas = holder.querySelector('canvas');
    if (!window.__drawnText(canvas).length) bad.push(`${holder.dataset.chart}: no text drawn (not measured)`);
    for (const t of window.__drawnText(canvas)) {
      if (t.x0 < -1 || t.x1 > canvas.width + 1 || t.y0 < -1 || t.y1 > canvas.height + 1) {
        bad.push(`${holder.dataset.chart}: "${t.text}" drawn at ${Math.round(t.x0)}..${Math.round(t.x1)} x ` +
                 `${Math.round(t.y0)}..${Math.round(t.y1)} on a ${canvas.width} x ${canvas.height} canvas`);
      }
    }
  }
  if (document.documentElement.scrollWidth > window.innerWidth) bad.push('the page scrolls sideways');
  return bad;
}
"""


def _wait(page: Any, expression: str) -> None:
    """Poll ``expression`` until true. Playwright's ``wait_for_function`` evaluates a string,
    which the page's CSP (no 'unsafe-eval') rightly refuses; ``evaluate`` goes through DevTools."""
    while not page.evaluate(expression):
        page.wait_for_timeout(50)


class PageWatch:
    """Console errors, page errors, dialogs and every request URL of one browser page."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))

        def dismiss(dialog: Any) -> None:
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", dismiss)


@dataclass
class Runs:
    """The module's sidecar and the runs it holds."""

    thread: ServiceThread
    client: httpx.Client
    clock: ManualClock
    live: SidecarRun
    followed: str
    unobserved: str
    magnitude: str
    unobserved_rows: list[dict[str, Any]]

    @property
    def url(self) -> str:
        return self.live.url

    def get(self, path: str, **params: Any) -> Any:
        return self.live.get(path, **params)


def _bare(row: dict[str, Any]) -> dict[str, Any]:
    """A row as NeMo Gym writes it without trajectory capture: no ``ng_trajectory``, no time."""
    return {key: value for key, value in row.items() if not key.startswith("ng_")}


def _timed_row(task: int, at: float) -> dict[str, Any]:
    """A healthy row whose only time is its own trajectory's (NeMo Gym's turn ``timestamp``)."""
    ids = {"task_id": f"t{task}", "rollout_id": f"t{task}-r0"}
    return {
        "_ng_task_index": task,
        "_ng_rollout_index": 0,
        "response": {"usage": {"input_tokens": 10, "output_tokens": 5}},
        "ng_trajectory": {
            **ids,
            "turns": [
                {
                    "invocation_id": "main",
                    **ids,
                    "turn_no": 1,
                    "timestamp": at,
                    "step_count": 1,
                    "answer": "Paris",
                    "model_calls": [{"model_call_id": "c1"}],
                }
            ],
            "model_calls": [
                {
                    "model_call_id": "c1",
                    "response": {"output_text": "Paris"},
                    "response_metadata": {
                        "response_id": f"r{task}",
                        "status_code": 200,
                        "finish_reason": "stop",
                        "model_ref": {"type": "responses_api_models", "name": "policy"},
                    },
                    "token_stats": {"prompt_tokens": 10, "completion_tokens": 5},
                }
            ],
        },
    }


def _magnitude_rows() -> list[dict[str, Any]]:
    """Completions at 1/h for four hours, then 10/h, 100/h and for 24 minutes 10,000/h: rates over
    four orders of magnitude, each row timed by its trajectory alone (sent with no ``at``)."""
    start, times = T0 - 12 * 3600, []
    for per_hour, hours in ((1, 4.0), (10, 2.0), (100, 2.0), (10_000, 0.4)):
        count = round(per_hour * hours)
        times.extend(start + (k + 0.5) * hours * 3600 / count for k in range(count))
        start += hours * 3600
    return [_timed_row(task, at) for task, at in enumerate(times)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as instance:
        yield instance


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    tmp = tmp_path_factory.mktemp("browser")
    with sidecar(tmp) as (thread, client, clock):
        url = str(client.base_url).rstrip("/")

        def post(run_id: str, events: list[dict[str, Any]]) -> None:
            for start in range(0, len(events), 500):
                response = client.post(f"/v1/runs/{run_id}/events", json=events[start : start + 500])
                assert response.status_code == 200, response.text

        rows = _magnitude_rows()
        post("magnitude", [{"kind": "run_started", "started_at": T0 - 12 * 3600}])
        post("magnitude", [{"kind": "completed", "seconds": 30.0, "row": row} for row in rows])
        post("magnitude", [{"kind": "run_ended", "ended_at": T0 - 12 * 3600 + 8.4 * 3600}])

        generated = [e for e in run_events(seed=8) if e["kind"] == "completed" and "row" in e]
        unobserved = [_bare(e["row"]) for e in generated]
        post("unobserved", [{"kind": "run_started", "started_at": T0 - 7200}])
        stamped = [
            {"kind": "completed", "seconds": e["seconds"], "row": row, "at": e["at"] - 7200}
            for e, row in zip(generated, unobserved, strict=True)
        ]
        post("unobserved", stamped)

        run_dir = tmp / "followed"
        run_dir.mkdir()
        lines = [
            orjson.dumps({**row, "ng_perf": {"total_latency_ms": 1000.0 * e["seconds"]}}) + b"\n"
            for e, row in zip(generated, unobserved, strict=True)
        ]
        (run_dir / "rollouts.jsonl").write_bytes(b"".join(lines))
        follow = ["follow", str(run_dir), "--sidecar", url, "--run-id", "followed", "--once"]
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # Playwright's loop holds this thread
            assert pool.submit(cli_main, follow).result() == 0

        live = start_run(url, client, clock, "run-page", hostile=True)
        live.advance(batches=20)
        yield Runs(thread, client, clock, live, "followed", "unobserved", "magnitude", unobserved)


def _open(browser: Any, url: str, width: int = WIDTHS[0]) -> tuple[Any, PageWatch]:
    page = browser.new_page(viewport={"width": width, "height": 900})
    page.add_init_script(RECORD_CANVAS_TEXT)
    watch = PageWatch(page)
    page.goto(url)
    _wait(page, READY)
    return page, watch


def _at_each_width(page: Any, name: str, out: Path, check: Callable[[int], None] | None = None) -> None:
    """Draw the page at each of :data:`WIDTHS` (resizing one loaded page), screenshot it and
    assert nothing leaves its card or canvas there; ``check(width)`` runs at each width too."""
    for width in WIDTHS:
        if page.viewport_size["width"] != width:
            seen = page.evaluate("window.sidecarPage.renders")
            page.set_viewport_size({"width": width, "height": 900})
            _wait(page, f"window.sidecarPage.renders > {seen}")
        page.screenshot(path=str(out / f"{name}-{width}.png"), full_page=True)
        bad = page.evaluate(LAYOUT)
        assert bad == [], f"{name} at {width} px: " + "\n".join(bad)
        if check is not None:
            check(width)


def _refresh_after_now(page: Any) -> None:
    """Wait until a refresh that started after this call has finished (no clock involved)."""
    seen = page.evaluate("window.sidecarPage.refreshes")
    _wait(page, f"window.sidecarPage.refreshes >= {seen + 2}")


def _facts(page: Any, name: str) -> dict[str, str]:
    return dict(
        page.evaluate(
            """name => Array.from(document.querySelectorAll(`[data-facts="${name}"] dd[data-key]`))
                .map(dd => [dd.getAttribute('data-key'), dd.getAttribute('data-value')])""",
            name,
        )
    )


def _shown_facts(page: Any, name: str) -> dict[str, str]:
    return dict(
        page.evaluate(
            """name => Array.from(document.querySelectorAll(`[data-facts="${name}"] dd[data-key]`))
                .map(dd => [dd.getAttribute('data-key'), dd.textContent])""",
            name,
        )
    )


def _table(page: Any, name: str) -> list[list[str]]:
    rows: list[list[str]] = page.evaluate(
        """name => Array.from(document.querySelectorAll(`table[data-table="${name}"] tbody tr`))
            .map(tr => Array.from(tr.children).map(td => td.textContent))""",
        name,
    )
    return rows


def _table_values(page: Any, name: str) -> list[list[str]]:
    """Each cell's exact value as the page holds it (``data-value``), row by row."""
    rows: list[list[str]] = page.evaluate(
        """name => Array.from(document.querySelectorAll(`table[data-table="${name}"] tbody tr`))
            .map(tr => Array.from(tr.children)
                .map(td => td.querySelector('[data-value]').getAttribute('data-value')))""",
        name,
    )
    return rows


def _shown(value: Any) -> str:
    """A JSON value as the page writes it into ``data-value`` (JavaScript's ``String``)."""
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _chart(page: Any, name: str) -> list[list[Any]]:
    data: list[list[Any]] = page.evaluate("name => window.sidecarPage.charts[name].data", name)
    return data


def _same(plotted: list[Any], served: list[Any]) -> bool:
    return len(plotted) == len(served) and all(
        (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 1e-9 * max(1, abs(b)))
        for a, b in zip(plotted, served, strict=True)
    )


def _positive(values: list[Any]) -> list[Any]:
    """What a log axis draws: values above 0, nothing for the rest."""
    return [v if v is not None and v > 0 else None for v in values]


class TestFollowedFinishedRun:
    def test_no_invented_rate_anywhere_and_the_page_says_why(
        self, browser: Any, runs: Runs, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        run_id = runs.followed
        report = runs.get("/report", run_id=run_id)
        timeline = runs.get(f"/v1/runs/{run_id}/timeline")
        body = runs.get(f"/v1/runs/{run_id}/page")
        metrics = runs.client.get("/metrics").text
        state = runs.thread.service.ingestor.runs[run_id]
        assert report["events"]["completed"] == len(runs.unobserved_rows) and report["ended_at"] is not None
        assert report["latency"]["samples"] > 0  # durations (NeMo Gym's latency) are not times
        assert report["latency"]["completions_per_hour"] is None
        assert timeline["t"] == [] and all(values == [] for values in timeline["series"].values())
        assert f'rollout_sidecar_rollouts_per_hour{{run_id="{run_id}"' not in metrics
        assert 'rollout_sidecar_rollouts_per_hour{run_id="run-page"' in metrics  # a timed run has one
        keys = {*live_metrics(state, runs.clock.now), *final_metrics(report)}
        assert not {key for key in keys if "per_hour" in key} and PREFIX + "final/completed" in keys
        assert state.rates() == (None, None)

        page, watch = _open(browser, f"{runs.url}/runs/{run_id}")
        out = artifacts_dir(tmp_path_factory)

        def check(width: int) -> None:
            throughput = _facts(page, "throughput")
            assert throughput["completions_per_hour"] == "null"
            assert _shown_facts(page, "throughput")["completions_per_hour"] == "no timing"
            assert throughput["completed"] == str(report["events"]["completed"])
            notes = page.evaluate(
                "Array.from(document.querySelectorAll('.notiming')).map(n => n.textContent)"
            )
            assert notes == [NO_TIMING, NO_TIMING]  # where the rate and the drain charts would be
            drawn = set(page.evaluate("Object.keys(window.sidecarPage.charts)"))
            assert "latency" in drawn  # durations are not times: its one chart over them
            assert not drawn & {"throughput", "drain", "inflight", "verdicts"}
            assert page.text_content("#not-checked") == f"Not checked: {body['health']['unobserved_reason']}."

        _at_each_width(page, "followed", out, check)
        page.close()
        assert watch.errors == []


class TestLivePage:
    def test_loads_clean_at_every_width_from_its_own_origin(
        self, browser: Any, runs: Runs, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        page, watch = _open(browser, f"{runs.url}/runs/{runs.live.run_id}")
        _at_each_width(page, "live", artifacts_dir(tmp_path_factory))
        page.close()
        assert watch.errors == []
        assert watch.requests and all(url.startswith(runs.url + "/") for url in watch.requests), (
            watch.requests
        )

    def test_index_lists_the_runs(self, browser: Any, runs: Runs) -> None:
        page, watch = _open(browser, f"{runs.url}/")
        rows = {row[0]: row[1] for row in _table(page, "runs")}
        page.close()
        expected = {"magnitude": "ended", "unobserved": "running", "followed": "ended", "run-page": "running"}
        assert expected.items() <= rows.items()
        assert watch.errors == []

    def test_every_chart_plots_the_sidecars_numbers(self, browser: Any, runs: Runs) -> None:
        live = runs.live
        page, watch = _open(browser, f"{live.url}/runs/{live.run_id}", width=1280)
        _refresh_after_now(page)  # nothing moves: the clock stands still between posts
        timeline = live.get(f"/v1/runs/{live.run_id}/timeline")
        report = live.get("/report", run_id=live.run_id)
        body = live.get(f"/v1/runs/{live.run_id}/page")
        series = timeline["series"]
        charts = {
            name: _chart(page, name) for name in ("throughput", "drain", "inflight", "verdicts", "latency")
        }
        header, latency, health = _facts(page, "header"), _facts(page, "latency"), _facts(page, "health")
        drain, throughput = _facts(page, "drain"), _facts(page, "throughput")
        issues = {row[0]: int(row[1].replace(",", "")) for row in _table(page, "issues")}
        coverage = {row[0]: row[1] for row in _table(page, "coverage")}
        latency_rows = _table(page, "latency")
        distr = page.evaluate("window.sidecarPage.charts.throughput.scales.y.distr")
        page.close()
        assert watch.errors == []

        assert len(timeline["t"]) > 10
        assert distr == 1  # rates within two orders of magnitude: a linear axis
        assert _same(charts["throughput"][0], timeline["t"])
        assert _same(charts["throughput"][1], series["rollouts_per_hour"])
        assert float(throughput["completions_per_hour"]) == report["latency"]["completions_per_hour"] > 0
        assert _same(charts["drain"][1], _positive(series["seconds_left"]))
        assert _same(charts["drain"][2], _positive(series["drain_margin_s"]))
        assert _same(charts["inflight"][1], series["in_flight"]) and _same(
            charts["inflight"][2], series["stragglers"]
        )
        assert _same(charts["verdicts"][1], series["healthy"]) and _same(
            charts["verdicts"][2], series["unhealthy"]
        )

        quantiles = report["latency"]["quantiles"]
        assert float(latency["p50"]) == quantiles["0.5"] and float(latency["p95"]) == quantiles["0.95"]
        assert float(latency["p75"]) == quantiles["0.75"]
        assert float(latency["drain_margin"]) == report["latency"]["drain_margin"]
        completed = body["durations"]["completed"]["counts"]
        assert [int(row[1].replace(",", "")) for row in latency_rows] == completed
        assert sum(completed) == report["events"]["completed"]
        total = sum(completed)
        running = 0
        plotted = charts["latency"][1]
        assert plotted[-1] == 1.0  # drawn to the first bucket past the longest duration
        for index, count in enumerate(completed[: len(plotted)]):
            running += count
            assert plotted[index] == pytest.approx(running / total)

        accounting = report["accounting"]
        for key in ("succeeded", "failed", "drained"):
            assert int(header[key]) == accounting[key]
            assert coverage[key].replace(",", "") == str(accounting[key])
        assert coverage["missing"].replace(",", "") == str(accounting["missing"])
        verdicts = report["quality_summary"]["run"]["verdicts"]
        assert {key: int(health[key]) for key in verdicts} == verdicts
        rollout_issues = {
            k: v for k, v in report["quality_summary"]["run"]["issues"].items() if not k.startswith("task_")
        }
        assert {k: issues[k] for k in rollout_issues} == rollout_issues
        assert float(drain["seconds_left"]) == body["drain"]["seconds_left"]
        crossing = next(
            t
            for t, left, margin in zip(
                timeline["t"], series["seconds_left"], series["drain_margin_s"], strict=True
            )
            if left is not None and (left <= 0 or (margin is not None and left < margin))
        )
        assert float(drain["pointless_at"]) == crossing

    def test_per_agent_throughput_and_latency_are_the_sidecars(self, browser: Any, runs: Runs) -> None:
        """Read from the page (the chart's data and each table cell's number), compared with the
        page JSON: two agents, one of them named with hostile text."""
        live = runs.live
        page, watch = _open(browser, f"{live.url}/runs/{live.run_id}")
        _refresh_after_now(page)
        body = live.get(f"/v1/runs/{live.run_id}/page")
        plotted = _chart(page, "agents")
        side_by_side = _table_values(page, "agents")
        totals = _table_values(page, "agents-totals")
        page.close()
        assert watch.errors == []
        agents = body["agents"]
        assert [agent["agent"] for agent in agents] == sorted([HOSTILE, SECOND_AGENT])
        assert plotted[0] == list(range(len(agents)))
        assert _same(plotted[1], [agent["rollouts_per_hour"] for agent in agents])
        assert _same(plotted[2], [agent["latency_p95_s"] for agent in agents])
        keys = ("agent", "rollouts_per_hour", "latency_p50_s", "latency_p95_s", "failed")
        assert side_by_side == [[_shown(agent[key]) for key in keys] for agent in agents]
        every = ("rollouts", "failed", "rollouts_per_hour", "latency_samples", "latency_p50_s",
                 "latency_p95_s", "num_turns", "num_tool_calls", "prompt_tokens",
                 "completion_tokens")  # fmt: skip
        assert totals == [[agent["agent"], *(_shown(agent[key]) for key in every)] for agent in agents]

    def test_hostile_ids_and_names_render_as_text(self, browser: Any, runs: Runs) -> None:
        live = runs.live
        page, watch = _open(browser, f"{live.url}/runs/{live.run_id}")
        injected = page.evaluate("document.querySelectorAll('#app img, #app script').length")
        oldest = _table(page, "oldest")
        details = page.evaluate("document.querySelector('table[data-table=\"unhealthy\"]').textContent")
        agent_cells = page.evaluate(
            "Array.from(document.querySelectorAll('table[data-table=\"agents\"] tbody tr td:first-child'))"
            ".map(td => [td.textContent, td.children.length, td.firstElementChild.children.length])"
        )
        pwned = page.evaluate("window.__pwned === undefined")
        # a run id outside the rules never reaches a page: the route answers 404 JSON
        response = page.goto(f"{live.url}/runs/{quote(HOSTILE, safe='')}")
        assert response is not None and response.status == 404
        assert response.headers["content-type"].startswith("application/json")
        injected_404 = page.evaluate("document.querySelectorAll('img').length")
        page.close()
        assert injected == 0 and injected_404 == 0 and pwned
        assert watch.dialogs == []
        assert oldest[0][:2] == [HOSTILE, "0"] or any(row[0] == HOSTILE for row in oldest)
        assert "<img src=x onerror=" in details  # the model name in a failed call's finding (JSON text)
        assert [HOSTILE, 1, 0] in agent_cells  # the agent's name: one text span, no element parsed

    def test_a_run_id_with_every_allowed_punctuation_is_text(self, browser: Any, runs: Runs) -> None:
        run_id = "javascript:alert@1--.x"
        response = runs.client.post(f"/v1/runs/{run_id}/events", json=[{"kind": "run_started"}])
        assert response.status_code == 200
        page, watch = _open(browser, f"{runs.url}/runs/{quote(run_id, safe='')}")
        shown = page.text_content("#run-id")
        link_count = page.evaluate("document.querySelectorAll('a[href^=\"javascript\"]').length")
        page.goto(f"{runs.url}/")
        _wait(page, READY)
        hrefs = page.evaluate(
            "Array.from(document.querySelectorAll('table[data-table=\"runs\"] a'))"
            ".map(a => a.getAttribute('href'))"
        )
        page.close()
        assert shown == run_id and link_count == 0
        assert f"/runs/{quote(run_id, safe='')}" in hrefs
        assert watch.errors == [] and watch.dialogs == []

    def test_new_events_show_at_the_next_refresh(self, browser: Any, runs: Runs) -> None:
        live = runs.live  # last of the live page's tests: it moves the run on
        page, watch = _open(browser, f"{live.url}/runs/{live.run_id}")
        page.click('details[data-key="throughput"] summary')
        page.evaluate("window.scrollTo(0, 1500)")
        before = int(_facts(page, "throughput")["completed"])
        seen = page.evaluate("window.sidecarPage.refreshes")
        live.advance(batches=3)
        expected = live.get("/report", run_id=live.run_id)["events"]["completed"]
        assert expected > before
        # any refresh that began after the post shows it: wait for one, without a clock
        _wait(page, f"window.sidecarPage.refreshes >= {seen + 2}")
        after = int(_facts(page, "throughput")["completed"])
        kept = page.evaluate(
            "[window.scrollY, document.querySelector('details[data-key=\"throughput\"]').open]"
        )
        page.close()
        assert after == expected
        assert kept == [1500, True]  # a refresh keeps the reader's place and open tables
        assert watch.errors == []


class TestUnobservedRun:
    def _check(self, page: Any, body: dict[str, Any]) -> None:
        health = body["health"]
        reason = health["unobserved_reason"]
        assert reason is not None and "no ng_trajectory in these rows" in reason
        assert page.text_content("#not-checked") == f"Not checked: {reason}."
        shown = _shown_facts(page, "health")
        for verdict in ("healthy", "unhealthy"):  # a zero no checked row could reach is no count
            count = health["verdicts"][verdict]
            assert shown[verdict] == (f"{count:,}" if count else "not checked")
        assert shown["healthy"] == "not checked"
        assert shown["unobserved"] == f"{health['verdicts']['unobserved']:,}"
        marked = {row[0]: row[2] for row in _table(page, "issues")}
        coverage = health["coverage"]
        blind = {check for check, c in coverage.items() if c["evaluated"] == 0 and c["unobserved"] > 0}
        assert len(blind) >= 9  # the nine trajectory checks, and the task checks in a batch page
        assert {check for check, text in marked.items() if text.startswith("not run")} == blind

    def test_live_saved_and_batch_pages_say_nothing_was_checked(
        self, browser: Any, runs: Runs, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        out = artifacts_dir(tmp_path_factory)
        run_id = runs.unobserved
        body = runs.get(f"/v1/runs/{run_id}/page")
        timeline = runs.get(f"/v1/runs/{run_id}/timeline")
        report = runs.get("/report", run_id=run_id)
        verdicts = report["quality_summary"]["run"]["verdicts"]
        assert verdicts["healthy"] == 0 and verdicts["unobserved"] > 2 * verdicts["unhealthy"]
        page, watch = _open(browser, f"{runs.url}/runs/{run_id}")

        def check(width: int) -> None:
            self._check(page, body)
            assert _same(_chart(page, "throughput")[1], timeline["series"]["rollouts_per_hour"])

        _at_each_width(page, "unobserved", out, check)
        page.close()

        saved = tmp_path / "run.html"
        assert cli_main(["report", "--sidecar", runs.url, "--run-id", run_id, "--html", str(saved)]) == 0
        page, saved_watch = _open(browser, saved.as_uri())
        self._check(page, body)
        page.close()

        run_dir = tmp_path / "batch"
        run_dir.mkdir()
        (run_dir / "rollouts.jsonl").write_bytes(
            b"".join(orjson.dumps(r) + b"\n" for r in runs.unobserved_rows)
        )
        batch = tmp_path / "batch.html"
        assert cli_main(["health-check", str(run_dir), "--html", str(batch)]) == 0
        page, batch_watch = _open(browser, batch.as_uri())
        embedded = orjson.loads(page.text_content("#page-data"))
        self._check(page, embedded["page"])
        _at_each_width(page, "unobserved-batch", out)
        page.close()
        assert watch.errors == [] and saved_watch.errors == [] and batch_watch.errors == []
        assert saved_watch.requests == [saved.as_uri()] and batch_watch.requests == [batch.as_uri()]


class TestRatesOverFourOrdersOfMagnitude:
    def test_every_label_fits_and_the_rates_are_the_sidecars(
        self, browser: Any, runs: Runs, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        run_id = runs.magnitude
        timeline = runs.get(f"/v1/runs/{run_id}/timeline")
        report = runs.get("/report", run_id=run_id)
        rates = [rate for rate in timeline["series"]["rollouts_per_hour"] if rate]
        assert min(rates) < 200 and max(rates) > 9_000  # per interval; the window rate spans 1 to 10^4
        assert sum(timeline["series"]["completed"]) == report["events"]["completed"]  # every row timed
        page, watch = _open(browser, f"{runs.url}/runs/{run_id}")

        def check(width: int) -> None:
            plotted = _chart(page, "throughput")
            assert page.evaluate("window.sidecarPage.charts.throughput.scales.y.distr") == 3  # log
            assert _same(plotted[0], timeline["t"])
            assert _same(plotted[1], _positive(timeline["series"]["rollouts_per_hour"]))
            trailing = [rate for rate in plotted[2] if rate is not None]
            assert min(trailing) < 10 and max(trailing) > 9_000
            shown = float(_facts(page, "throughput")["completions_per_hour"])
            assert shown == report["latency"]["completions_per_hour"]

        _at_each_width(page, "magnitude", artifacts_dir(tmp_path_factory), check)
        page.close()
        assert watch.errors == []


class TestSavedFiles:
    def test_report_html_opens_offline_with_the_same_numbers_and_when_it_was_written(
        self, browser: Any, runs: Runs, tmp_path: Path
    ) -> None:
        live = runs.live
        target = tmp_path / "run.html"
        assert (
            cli_main(["report", "--sidecar", live.url, "--run-id", live.run_id, "--html", str(target)]) == 0
        )
        timeline = live.get(f"/v1/runs/{live.run_id}/timeline")
        page, watch = _open(browser, target.as_uri())
        plotted = _chart(page, "throughput")
        status = page.text_content("#run-status")
        note = page.text_content("#as-of")
        written = orjson.loads(page.text_content("#page-data"))["written_at"]
        injected = page.evaluate("document.querySelectorAll('#app img').length")
        page.close()
        assert watch.requests == [target.as_uri()]  # the file itself, nothing else
        assert watch.errors == [] and watch.dialogs == [] and injected == 0
        assert _same(plotted[0], timeline["t"]) and _same(plotted[1], timeline["series"]["rollouts_per_hour"])
        assert status == "running"
        assert abs(written - time.time()) < 600  # the wall clock, not the sidecar's
        assert note is not None and note.endswith("written " + _utc(written)) and str(T0) not in note

    def test_health_check_html_is_the_batch_page(
        self, browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "batch"
        run_dir.mkdir()
        rows = [e["row"] for e in run_events(hostile=True) if e["kind"] == "completed" and "row" in e]
        (run_dir / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
        target = tmp_path / "batch.html"
        assert cli_main(["health-check", str(run_dir), "--html", str(target)]) == 0
        summary = orjson.loads((run_dir / "quality_summary.json").read_bytes())
        page, watch = _open(browser, target.as_uri())
        health = _facts(page, "health")
        unhealthy_rows = len(_table(page, "unhealthy"))
        perf = dict((row[0], row[1]) for row in _table(page, "perf"))
        sections = page.evaluate("Array.from(document.querySelectorAll('#app section')).map(s => s.id)")
        warned = page.evaluate("document.querySelector('#not-checked') !== null")
        page.close()
        assert watch.requests == [target.as_uri()]
        assert watch.errors == [] and watch.dialogs == []
        verdicts = summary["run"]["verdicts"]
        assert {key: int(health[key]) for key in verdicts} == verdicts
        assert unhealthy_rows == min(50, verdicts["unhealthy"])
        assert "total_prompt_tokens" in perf
        assert sections == ["health", "agents", "perf"]
        assert not warned  # its rows carry trajectories: checked


def _utc(unix: float) -> str:
    """A time as the page writes it."""
    return datetime.datetime.fromtimestamp(unix, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
