"""The page's perf summary on the real service over HTTP: built from a cut, beside ingest
(``sidecar/web/routes.py``'s ``_PerfCache``)."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx

from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings

from .support import ManualClock, SidecarRun, run_events


def test_ingest_goes_on_while_the_page_builds_its_perf_summary(tmp_path: Path) -> None:
    """The page's perf summary is computed from a cut, outside the ingest pause: an event POST
    is acknowledged while a build is held mid-way, and the build covers the rows of its cut."""
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    building, release = threading.Event(), threading.Event()

    def hold() -> None:  # on the worker thread, after the cut: the first build "takes" until released
        if building.is_set():
            return  # a later read built from a cut (/report) goes on
        building.set()
        assert release.wait(60), "the test never released the build"

    thread = ServiceThread(settings, clock=ManualClock())
    with thread as url, httpx.Client(base_url=url, timeout=30) as client:
        run = SidecarRun(url, client, ManualClock(), "run-cut", pending=run_events())
        run.post([{"kind": "run_started"}])
        run.advance(batches=10)
        before = run.get("/report", run_id=run.run_id)["quality_summary"]["run"]["artifacts"]["records"]
        assert thread.service is not None
        thread.service.reads.on_compute = hold
        try:
            body = run.get(f"/v1/runs/{run.run_id}/page")  # starts the build, waits 0.25 s at most
            assert body["perf_summary"] is None and body["perf_pending"] is True
            assert building.wait(30)
            assert run.advance(batches=3) > 0  # acknowledged while the build is held
            assert not release.is_set()
            after = run.get("/report", run_id=run.run_id)["quality_summary"]["run"]["artifacts"]["records"]
            assert after > before
        finally:
            thread.service.reads.on_compute = None
            release.set()
        body = run.get(f"/v1/runs/{run.run_id}/page")
        while body["perf_summary"] is None:  # the held build's result is the first one held
            body = run.get(f"/v1/runs/{run.run_id}/page")
        assert body["perf_rollouts"] == before  # over the rows of its cut, not the ones posted during it
