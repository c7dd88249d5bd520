"""The docs agree with the code: the README's client snippet runs, docs/report.md covers every field,
docs/metrics.md every metric family and docs/http-api.md every read field and error code."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import httpx
import pytest

from health.registry import CHECK_IDS
from sidecar.http.errors import ErrorCode
from sidecar.http.server import ServiceThread
from sidecar.http.settings import Secret, ServiceSettings
from tests.dispatcher_client.support import free_port
from tests.sidecar.service_support import generate_run, post_events

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
REPORT_DOC = REPO / "docs" / "report.md"
METRICS_DOC = REPO / "docs" / "metrics.md"
HTTP_API_DOC = REPO / "docs" / "http-api.md"


def _client_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use it from a dispatcher") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "no python block under 'Use it from a dispatcher'"
    return match.group(1)


def test_the_client_snippet_runs_against_a_real_sidecar(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "ROLLOUT_SIDECAR_TOKEN"}
    with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")) as url:
        env["ROLLOUT_SIDECAR_URL"] = url
        done = subprocess.run(
            [sys.executable, "-c", _client_snippet()], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == "drain margin: 900.0\nsucceeded: 1\n"
        margin = httpx.get(f"{url}/drain_margin", params={"run_id": "run-7"}).json()
        report = httpx.get(f"{url}/report", params={"run_id": "run-8"}).json()
    assert (margin["samples"], margin["drain_margin"]) == (5, 900.0)  # forwarded, not only local
    assert report["events"]["completed"] == 1


def _run_snippet(url: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "ROLLOUT_SIDECAR_TOKEN"}
    env["ROLLOUT_SIDECAR_URL"] = url
    return subprocess.run(
        [sys.executable, "-c", _client_snippet()], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_client_snippet_without_a_sidecar_ends_in_one_line_naming_the_url() -> None:
    done = _run_snippet("http://127.0.0.1:9")
    assert done.returncode == 1
    assert done.stderr.startswith("error: cannot reach the sidecar at http://127.0.0.1:9: GET /report failed")
    assert done.stderr.count("\n") == 1, done.stderr


def test_the_client_snippet_without_the_token_says_401_not_unknown_run(tmp_path: Path) -> None:
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3", token=Secret("s3cret"))
    with ServiceThread(settings) as url:
        done = _run_snippet(url)
    assert done.returncode == 1
    assert done.stderr.startswith(f"error: the sidecar at {url} has no run 'run-8' because it refused")
    assert "HTTP 401" in done.stderr and "ROLLOUT_SIDECAR_TOKEN" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_report_doc_names_every_field_and_check(tmp_path: Path) -> None:
    run = generate_run(num_tasks=3, repeats=2)
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url, httpx.Client(base_url=url) as client:
        post_events(client, "doc", [{"kind": "run_started", "plan": run.plan}, *run.events])
        report = client.get("/report", params={"run_id": "doc"}).json()
    text = REPORT_DOC.read_text(encoding="utf-8")
    documented = {part for path in re.findall(r"`([a-z_0-9.]+)`", text) for part in path.split(".")}
    fields = [*report, *report["latency"], *report["accounting"], *report["events"], *report["health"]]
    fields += [*report["quality_summary"]["run"], *report["quality_summary"]["run"]["stats"]]
    assert sorted(set(fields) - documented) == []
    rows = re.findall(r"^\| (\d+) \| `([a-z_]+)` \|", text, re.M)
    assert [check for _, check in rows] == list(CHECK_IDS)  # one table, registry order


@dataclass(frozen=True)
class _Answers:
    metrics: str
    drain_margin: dict[str, Any]
    inflight: dict[str, Any]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Answers]:
    """A real ``serve --follow`` (so the follower's families exist too) with a run that has a plan,
    a budget, a task timeout, finished rollouts and one in flight: every family has its series."""
    tmp = tmp_path_factory.mktemp("live")
    (tmp / "followed").mkdir()
    port = free_port()
    argv = [sys.executable, "-m", "sidecar.cli", "serve", "--port", str(port)]
    argv += ["--journal", str(tmp / "j.sqlite3"), "--follow", str(tmp / "followed")]
    url = f"http://127.0.0.1:{port}"
    with subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        try:
            for _ in range(600):  # until it is ready (or gone): polled, not timed
                if process.poll() is not None:
                    break
                try:
                    if httpx.get(f"{url}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            run = generate_run(num_tasks=3, repeats=2)
            started = {
                "kind": "run_started",
                "plan": run.plan,
                "dispatch_budget_s": 3600,
                "task_timeout_s": 600,
            }
            with httpx.Client(base_url=url) as client:
                post_events(client, "doc", [started, *run.events])
                post_events(
                    client,
                    "doc-inflight",
                    [started, {"kind": "started", "task_index": 0, "rollout_index": 0}],
                )
                yield _Answers(
                    metrics=client.get("/metrics").text,
                    drain_margin=client.get("/drain_margin", params={"run_id": "doc"}).json(),
                    inflight=client.get("/v1/runs/doc-inflight/inflight").json(),
                )
        finally:
            process.terminate()
            process.wait(30)


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same level."""
    start = text.index(heading)
    following = re.search(r"^## ", text[start + len(heading) :], re.M)
    return text[start : start + len(heading) + following.start()] if following else text[start:]


def _backticked(text: str) -> set[str]:
    return set(re.findall(r"`([A-Za-z_0-9.]+)`", text))


def test_metrics_doc_lists_exactly_the_exposed_families(live: _Answers) -> None:
    exposed = set(re.findall(r"^# TYPE (rollout_sidecar_\w+) ", live.metrics, re.M))
    documented = set(
        re.findall(r"^\| `(rollout_sidecar_\w+)` \|", METRICS_DOC.read_text(encoding="utf-8"), re.M)
    )
    assert len(exposed) > 30  # the scrape saw the run, service and follower families
    assert sorted(exposed - documented) == [], "exposed but not in docs/metrics.md"
    assert sorted(documented - exposed) == [], "in docs/metrics.md but not exposed"


def test_http_api_doc_names_every_drain_margin_field(live: _Answers) -> None:
    section = _section(HTTP_API_DOC.read_text(encoding="utf-8"), "## `GET /drain_margin")
    assert {"budget_deadline", "seconds_left", "start_now"} <= set(live.drain_margin)  # the run has a budget
    assert sorted(set(live.drain_margin) - _backticked(section)) == []


def test_http_api_doc_names_every_inflight_field(live: _Answers) -> None:
    section = _section(HTTP_API_DOC.read_text(encoding="utf-8"), "## `GET /v1/runs/{run_id}/inflight")
    body = live.inflight
    assert body["count"] == 1 and body["oldest"]
    fields = {*body, *body["rules"], *body["flagged"], *body["oldest"][0], *body["age_quantiles_s"]}
    assert sorted(fields - _backticked(section)) == []


def test_http_api_doc_has_one_row_per_error_code() -> None:
    app_source = (REPO / "sidecar" / "http" / "app.py").read_text(encoding="utf-8")
    codes = {*get_args(ErrorCode), *re.findall(r'error_body\(\s*"([a-z_]+)"', app_source)}
    errors = _section(HTTP_API_DOC.read_text(encoding="utf-8"), "## Errors")
    rows = re.findall(r"^\| `([a-z_]+)` \| \d{3}", errors, re.M)
    assert len(rows) == len(set(rows))
    assert sorted(codes - set(rows)) == [], "error codes the service answers but docs/http-api.md lacks"
    assert sorted(set(rows) - codes) == [], "rows in docs/http-api.md for codes the service never answers"
