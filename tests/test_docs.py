"""The docs agree with the code: the README's client snippet runs, docs/report.md covers every field."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from health.registry import CHECK_IDS
from sidecar.server import ServiceThread
from sidecar.settings import Secret, ServiceSettings
from tests.sidecar.service_support import generate_run, post_events

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
REPORT_DOC = REPO / "docs" / "report.md"


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
