"""Reads with a read token (``serve --read-token-file``): every read but the probes needs it or the
ingest token, as a bearer token or HTTP Basic's password; ``--open-metrics`` leaves /metrics open."""

from __future__ import annotations

import base64
from pathlib import Path

import httpx
import pytest

from sidecar.cli import main as cli_main
from sidecar.http.server import ServiceThread
from sidecar.http.settings import Secret, ServiceSettings

READS = (
    "/v1/runs",
    "/drain_margin?run_id=r",
    "/report?run_id=r",
    "/report/verdicts?run_id=r",
    "/v1/runs/r/inflight",
    "/v1/runs/r/timeline",
    "/runs/r",
    "/",
    "/openapi.json",
    "/metrics",
)


def _basic(password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"anyone:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> object:
    settings = ServiceSettings(
        port=0,
        journal_path=tmp_path_factory.mktemp("read-auth") / "j.sqlite3",
        token=Secret("ingest-secret"),
        read_token=Secret("read-secret"),
    )
    with ServiceThread(settings) as base:
        with httpx.Client(base_url=base, headers={"authorization": "Bearer ingest-secret"}) as client:
            assert client.post("/v1/runs/r/events", json=[{"kind": "run_started"}]).status_code == 200
        yield base


@pytest.mark.parametrize("path", READS)
def test_a_read_without_the_token_is_refused_naming_the_header(url: str, path: str) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, _basic("wrong"), {"authorization": "Basic %%%"}):
        answer = httpx.get(url + path, headers=headers)
        assert answer.status_code == 401, (path, headers)
        assert answer.json() == {
            "error": "unauthorized",
            "field": "authorization",
            "detail": "a valid read token is required",
        }
        assert answer.headers["www-authenticate"].startswith("Basic ")


@pytest.mark.parametrize("path", READS)
@pytest.mark.parametrize(
    "headers",
    [
        {"authorization": "Bearer read-secret"},
        {"authorization": "Bearer ingest-secret"},
        _basic("read-secret"),
    ],
    ids=["read-token", "ingest-token", "basic"],
)
def test_either_token_reads(url: str, path: str, headers: dict[str, str]) -> None:
    assert httpx.get(url + path, headers=headers).status_code == 200, path


def test_the_probes_stay_open(url: str) -> None:
    assert httpx.get(url + "/healthz").status_code == 200
    assert httpx.get(url + "/readyz").status_code == 200


def test_writes_still_need_the_ingest_token_not_the_read_token(url: str) -> None:
    answer = httpx.post(
        url + "/v1/runs/r/events", json=[{"kind": "run_ended"}], headers=_basic("read-secret")
    )
    assert answer.status_code == 401


def test_open_metrics_leaves_only_metrics_open(tmp_path: Path) -> None:
    settings = ServiceSettings(
        port=0, journal_path=tmp_path / "j.sqlite3", read_token=Secret("read-secret"), open_metrics=True
    )
    with ServiceThread(settings) as base:
        assert httpx.get(base + "/metrics").status_code == 200
        assert httpx.get(base + "/v1/runs").status_code == 401


def test_an_unreadable_read_token_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    code = cli_main(
        ["serve", "--port", "0", "--journal", str(tmp_path / "j"), "--read-token-file", str(missing)]
    )
    assert code == 2
    assert str(missing) in capsys.readouterr().err.strip().splitlines()[-1]
