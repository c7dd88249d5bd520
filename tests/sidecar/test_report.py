"""``rollout-sidecar report``: all three files from a real sidecar, or nothing and one clear line."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from sidecar.cli import main
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.sidecar.service_support import generate_run, post_events

RUN_ID = "rep"


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> object:
    run = generate_run(num_tasks=3, repeats=2)
    journal = tmp_path_factory.mktemp("report") / "j.sqlite3"
    with ServiceThread(ServiceSettings(port=0, journal_path=journal)) as url:
        with httpx.Client(base_url=url) as client:
            post_events(client, RUN_ID, [{"kind": "run_started", "plan": run.plan}, *run.events])
        yield url


def _report(url: object, out: Path, run_id: str = RUN_ID) -> int:
    return main(["report", "--sidecar", str(url), "--run-id", run_id, "--out", str(out)])


def test_writes_the_three_files(sidecar: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a" / "b"
    assert _report(sidecar, out) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "quality_summary.json",
        "report.json",
        "rollout_verdicts.jsonl",
    ]
    assert orjson.loads((out / "report.json").read_bytes())["run_id"] == RUN_ID
    assert "Report written:" in capsys.readouterr().out


def test_an_unknown_run_creates_nothing(
    sidecar: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _report(sidecar, tmp_path / "r2", run_id="nope") == 2
    assert not (tmp_path / "r2").exists()
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "404" in err and "unknown run 'nope'" in err and "GET /v1/runs" in err


def test_an_out_that_is_a_file_is_refused(
    sidecar: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    assert _report(sidecar, afile) == 2
    assert afile.read_text() == "keep me"
    err = capsys.readouterr().err
    assert err.startswith(f"rollout-sidecar report: output directory {str(afile)!r} is a file; ")
    assert err.endswith("pass a directory (created if missing)\n")


def test_an_out_under_a_file_is_refused(
    sidecar: object, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "afile").write_text("")
    assert _report(sidecar, tmp_path / "afile" / "sub") == 2
    assert "cannot create output directory" in capsys.readouterr().err


def test_an_existing_directory_keeps_its_other_files(sidecar: object, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    assert _report(sidecar, tmp_path, run_id="nope") == 2
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert _report(sidecar, tmp_path) == 0
    assert len(list(tmp_path.iterdir())) == 4
