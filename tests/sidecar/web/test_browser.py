"""The run page in a real browser (Debian's Chromium, headless, through Playwright).

Against a real sidecar fed a generated run: the page loads clean and talks to its own origin
only; what each chart plots equals the sidecar's report and timeline; new events show at the
next refresh; hostile ids and names stay text; the saved files make no request at all.
Screenshots (1280 and 390 wide) go to ``$ROLLOUT_SIDECAR_ARTIFACTS`` or a temporary directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from sidecar.cli import main as cli_main

from .support import HOSTILE, SECOND_AGENT, SidecarRun, artifacts_dir, chromium, feed

pytestmark = pytest.mark.timeout(240)

READY = "window.sidecarPage && window.sidecarPage.refreshes > 0"


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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as instance:
        yield instance


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarRun]:
    with feed(tmp_path_factory.mktemp("live"), hostile=True) as run:
        run.advance(batches=20)  # 200 simulated seconds of a 250 s budget
        yield run


def _open(browser: Any, url: str, width: int = 1280) -> tuple[Any, PageWatch]:
    page = browser.new_page(viewport={"width": width, "height": 900})
    watch = PageWatch(page)
    page.goto(url)
    _wait(page, READY)
    return page, watch


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


class TestLivePage:
    def test_loads_clean_from_its_own_origin_and_is_screenshotted(
        self, browser: Any, live: SidecarRun, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        out = artifacts_dir(tmp_path_factory)
        page, watch = _open(browser, f"{live.url}/runs/{live.run_id}")
        page.screenshot(path=str(out / "run-page-1280.png"), full_page=True)
        page.set_viewport_size({"width": 390, "height": 844})
        _refresh_after_now(page)
        page.screenshot(path=str(out / "run-page-390.png"), full_page=True)
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        page.close()
        assert watch.errors == []
        assert watch.requests and all(url.startswith(live.url + "/") for url in watch.requests), (
            watch.requests
        )
        assert (out / "run-page-1280.png").stat().st_size > 0 and (
            out / "run-page-390.png"
        ).stat().st_size > 0
        assert overflow <= 0, "the narrow page scrolls sideways"

    def test_index_lists_the_run(self, browser: Any, live: SidecarRun) -> None:
        page, watch = _open(browser, f"{live.url}/")
        rows = _table(page, "runs")
        href = page.get_attribute('table[data-table="runs"] a', "href")
        page.close()
        assert rows[0][:2] == [live.run_id, "running"]
        assert href == f"/runs/{live.run_id}"
        assert watch.errors == []

    def test_every_chart_plots_the_sidecars_numbers(self, browser: Any, live: SidecarRun) -> None:
        page, watch = _open(browser, f"{live.url}/runs/{live.run_id}")
        _refresh_after_now(page)  # nothing moves: the clock stands still between posts
        timeline = live.get(f"/v1/runs/{live.run_id}/timeline")
        report = live.get("/report", run_id=live.run_id)
        body = live.get(f"/v1/runs/{live.run_id}/page")
        series = timeline["series"]
        charts = {
            name: _chart(page, name) for name in ("throughput", "drain", "inflight", "verdicts", "latency")
        }
        header, latency, health = _facts(page, "header"), _facts(page, "latency"), _facts(page, "health")
        drain = _facts(page, "drain")
        issues = {row[0]: int(row[1].replace(",", "")) for row in _table(page, "issues")}
        coverage = {row[0]: row[1] for row in _table(page, "coverage")}
        latency_rows = _table(page, "latency")
        page.close()
        assert watch.errors == []

        assert len(timeline["t"]) > 10
        assert _same(charts["throughput"][0], timeline["t"])
        assert _same(charts["throughput"][1], series["rollouts_per_hour"])
        assert _same(charts["drain"][1], series["seconds_left"])
        assert _same(charts["drain"][2], series["drain_margin_s"])
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

    def test_per_agent_throughput_and_latency_are_the_sidecars(self, browser: Any, live: SidecarRun) -> None:
        """Read from the page (the chart's data and each table cell's number), compared with the
        page JSON: two agents, one of them named with hostile text."""
        page, watch = _open(browser, f"{live.url}/runs/{live.run_id}")
        _refresh_after_now(page)
        body = live.get(f"/v1/runs/{live.run_id}/page")
        plotted = _chart(page, "agents")
        side_by_side = _table_values(page, "agents")
        totals = _table_values(page, "agents-totals")
        caption = page.text_content("#agents")
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
        assert caption is not None and "does not keep" not in caption

    def test_new_events_show_at_the_next_refresh(self, browser: Any, live: SidecarRun) -> None:
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

    def test_hostile_ids_and_names_render_as_text(self, browser: Any, live: SidecarRun) -> None:
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


class TestHostileRunId:
    def test_a_run_id_with_every_allowed_punctuation_is_text(
        self, browser: Any, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        run_id = "javascript:alert@1--.x"
        with feed(tmp_path_factory.mktemp("hostile-id"), run_id=run_id) as run:
            run.advance(batches=4)
            page, watch = _open(browser, f"{run.url}/runs/{run_id}")
            shown = page.text_content("#run-id")
            link_count = page.evaluate("document.querySelectorAll('a[href^=\"javascript\"]').length")
            page.goto(f"{run.url}/")
            _wait(page, READY)
            href = page.get_attribute('table[data-table="runs"] a', "href")
            page.close()
        assert shown == run_id and link_count == 0
        assert href == f"/runs/{quote(run_id, safe='')}"
        assert watch.errors == [] and watch.dialogs == []


class TestSavedFiles:
    def test_report_html_opens_offline_with_the_same_numbers(
        self, browser: Any, live: SidecarRun, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> None:
        target = tmp_path / "run.html"
        assert (
            cli_main(["report", "--sidecar", live.url, "--run-id", live.run_id, "--html", str(target)]) == 0
        )
        timeline = live.get(f"/v1/runs/{live.run_id}/timeline")
        page, watch = _open(browser, target.as_uri())
        plotted = _chart(page, "throughput")
        status = page.text_content("#run-status")
        injected = page.evaluate("document.querySelectorAll('#app img').length")
        page.screenshot(path=str(artifacts_dir(tmp_path_factory) / "saved-run-1280.png"), full_page=True)
        page.close()
        assert watch.requests == [target.as_uri()]  # the file itself, nothing else
        assert watch.errors == [] and watch.dialogs == [] and injected == 0
        assert _same(plotted[0], timeline["t"]) and _same(plotted[1], timeline["series"]["rollouts_per_hour"])
        assert status == "running"

    def test_health_check_html_is_the_batch_page(
        self, browser: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        import orjson

        from .support import run_events

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
        page.close()
        assert watch.requests == [target.as_uri()]
        assert watch.errors == [] and watch.dialogs == []
        verdicts = summary["run"]["verdicts"]
        assert {key: int(health[key]) for key in verdicts} == verdicts
        assert unhealthy_rows == min(50, verdicts["unhealthy"])
        assert "total_prompt_tokens" in perf
        assert sections == ["health", "agents", "perf"]
