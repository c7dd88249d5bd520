"""``report --html`` and ``health-check --html``: the files, their refusals, and what they import."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from sidecar.cli import main as cli_main
from sidecar.http.responses import AgentBody
from sidecar.state.agents import agent_name
from sidecar.state.durations import DurationHistogram

from .support import SidecarRun, feed, run_events


def _embedded(path: Path) -> dict[str, object]:
    found = re.search(
        r'<script type="application/json" id="page-data">(.*?)</script>', path.read_text(), re.S
    )
    assert found is not None
    data: dict[str, object] = orjson.loads(found.group(1))
    return data


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarRun]:
    with feed(tmp_path_factory.mktemp("saved")) as fed:
        fed.advance(batches=10)
        yield fed


class TestReportHtml:
    def test_writes_the_page_and_timeline_of_the_run(self, run: SidecarRun, tmp_path: Path) -> None:
        target = tmp_path / "run.html"
        assert cli_main(["report", "--sidecar", run.url, "--run-id", run.run_id, "--html", str(target)]) == 0
        data = _embedded(target)
        assert data["page"] == run.get(f"/v1/runs/{run.run_id}/page")
        assert data["timeline"] == run.get(f"/v1/runs/{run.run_id}/timeline")
        assert not list(tmp_path.glob(".*.part"))

    def test_with_out_writes_both(self, run: SidecarRun, tmp_path: Path) -> None:
        args = ["report", "--sidecar", run.url, "--run-id", run.run_id]
        assert cli_main([*args, "--out", str(tmp_path / "r"), "--html", str(tmp_path / "r.html")]) == 0
        assert (tmp_path / "r" / "report.json").exists() and (tmp_path / "r.html").exists()

    def test_needs_out_or_html(self, run: SidecarRun, capsys: pytest.CaptureFixture[str]) -> None:
        assert cli_main(["report", "--sidecar", run.url, "--run-id", run.run_id]) == 2
        assert capsys.readouterr().err == "rollout-sidecar report: pass --out DIR, --html FILE or both\n"

    def test_unknown_run_is_one_line_and_exit_2(
        self, run: SidecarRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        target = tmp_path / "x.html"
        assert cli_main(["report", "--sidecar", run.url, "--run-id", "nope", "--html", str(target)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "/v1/runs/nope/page answered 404" in err
        assert not target.exists()


class TestHealthCheckHtml:
    def _run_dir(self, tmp_path: Path) -> Path:
        run_dir = tmp_path / "batch"
        run_dir.mkdir()
        rows = [e["row"] for e in run_events() if e["kind"] == "completed" and "row" in e]
        (run_dir / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
        return run_dir

    def test_writes_health_ng_perf_and_agents_and_keeps_stdout(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = self._run_dir(tmp_path)
        assert cli_main(["health-check", str(run_dir)]) == 0
        plain = capsys.readouterr().out
        target = tmp_path / "batch.html"
        assert cli_main(["health-check", str(run_dir), "--html", str(target)]) == 0
        assert capsys.readouterr().out == plain  # NeMo Gym's stdout, unchanged
        embedded = _embedded(target)
        page = embedded["page"]
        assert isinstance(page, dict)
        summary = orjson.loads((run_dir / "quality_summary.json").read_bytes())
        assert page["source"] == "batch" and embedded["timeline"] is None
        assert page["health"]["verdicts"] == summary["run"]["verdicts"]
        assert page["perf_summary"]["total_prompt_tokens"] > 0
        assert [agent["agent"] for agent in page["agents"]] == ["synthetic_agent"]
        assert page["agents"][0]["rollouts"] == summary["run"]["artifacts"]["records"]

    def test_agents_have_the_live_pages_shape_with_latency_from_ng_perf(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Batch rows per agent, in the live body's keys (``AgentBody``): latency from each row's
        ``ng_perf.total_latency_ms`` in the same buckets; no failures and no rate (``None``)."""
        run_dir = tmp_path / "agents"
        run_dir.mkdir()
        rows = [e["row"] for e in run_events(hostile=True) if e["kind"] == "completed" and "row" in e]
        latency: dict[str, DurationHistogram] = {}
        for index, row in enumerate(rows):
            if index % 3:  # some rows carry their own ng_perf with the rollout's latency
                ms = 1000.0 * (5 + 37 * index % 900)
                row["ng_perf"] = {"total_latency_ms": ms, "num_turns": 2, "prompt_tokens": 10}
                name = agent_name(row)
                if name is not None:
                    latency.setdefault(name, DurationHistogram()).observe(ms / 1000.0)
        (run_dir / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
        target = tmp_path / "agents.html"
        assert cli_main(["health-check", str(run_dir), "--html", str(target)]) == 0
        capsys.readouterr()
        agents = _embedded(target)["page"]["agents"]  # type: ignore[index]
        assert isinstance(agents, list) and len(agents) == 2 == len(latency)
        for agent in agents:
            assert list(agent) == list(AgentBody.__annotations__)
            assert agent["failed"] is None and agent["rollouts_per_hour"] is None
            histogram = latency[agent["agent"]]
            assert agent["latency_samples"] == histogram.observations > 0
            assert agent["latency_p50_s"] == histogram.quantile(0.5)
            assert agent["latency_p95_s"] == histogram.quantile(0.95)
        assert sum(agent["rollouts"] for agent in agents) == len(rows)

    def test_a_directory_as_html_is_refused_before_checking(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = self._run_dir(tmp_path)
        assert cli_main(["health-check", str(run_dir), "--html", str(tmp_path)]) == 2
        assert "not a file in an existing directory" in capsys.readouterr().err
        assert not (run_dir / "quality_summary.json").exists()

    def test_imports_neither_the_server_nor_an_http_client(self, tmp_path: Path) -> None:
        run_dir = self._run_dir(tmp_path)
        code = (
            "import sys\n"
            "from sidecar.cli import main\n"
            f"assert main(['health-check', {str(run_dir)!r}, '--html', {str(tmp_path / 'p.html')!r}]) == 0\n"
            "heavy = ('httpx', 'uvicorn', 'starlette', 'sidecar.http.app', 'sidecar.web.routes')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        assert done.stdout.strip().splitlines()[-1] == "[]"
        assert (tmp_path / "p.html").exists()
