"""The attach instrumentation inside a job: the bootstrap ``sitecustomize`` and the NeMo Gym hook.

Jobs are real child interpreters with the bootstrap directory first on ``PYTHONPATH``, as
``rollout-sidecar attach`` starts them; NeMo Gym is the stand-in of ``attach_standin`` (the real one
is tested in ``tests/nemo_gym``), the sidecar the real service on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from dispatcher_client.attach import BOOTSTRAP_DIR, POOLED_ENV, RUN_ID_ENV, URL_ENV, run_id_for
from dispatcher_client.attach.bootstrap import sitecustomize
from sidecar.http.server import ServiceThread
from sidecar.http.settings import Secret, ServiceSettings
from tests.dispatcher_client.attach_standin import ROWS_RAN, write_standin
from tests.dispatcher_client.support import free_port


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[str]:
    with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite")) as url:
        yield url


def _python(args: list[str], *paths: Path, url: str | None, **env: str) -> subprocess.CompletedProcess[str]:
    """A child interpreter as attach starts it (``url=None``: without attach's environment)."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("ROLLOUT_SIDECAR_ATTACH")}
    child["PYTHONPATH"] = os.pathsep.join([*([str(BOOTSTRAP_DIR)] if url else []), *map(str, paths)])
    child.update(env, **({URL_ENV: url} if url else {}))
    return subprocess.run(
        [sys.executable, *args], env=child, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_hook_reports_every_rollout_of_the_collection(sidecar: str, tmp_path: Path) -> None:
    job = write_standin(tmp_path)
    done = _python([str(job), str(tmp_path / "out.txt")], tmp_path, url=sidecar, **{RUN_ID_ENV: "standin"})
    assert done.returncode == 0, done.stderr
    assert "patched: True" in done.stdout  # and the job's tracker is the drop-in (NeMo Gym's summary):
    assert "over 3 completed rollout(s)" in done.stdout and "the budget): 2." in done.stdout
    assert f"rollout-sidecar attach: run standin: {sidecar}/runs/standin\n" in done.stderr
    report = httpx.get(f"{sidecar}/report", params={"run_id": "standin"}).json()
    accounting = report["accounting"]
    assert (accounting["expected"], accounting["tasks_planned"]) == (6, 3)  # the plan of the rows dispatched
    assert (accounting["succeeded"], accounting["failed"], accounting["drained"]) == (3, 1, 2)
    assert report["ended_at"] is not None and report["inflight_at_end"]["count"] == 0
    series = httpx.get(f"{sidecar}/v1/runs/standin/timeline").json()["series"]
    assert sum(series["started"]) == ROWS_RAN  # a start for every rollout that ran, none for drains
    # The row each completion carries is the one written, edited after ng_perf.
    page = httpx.get(f"{sidecar}/v1/runs/standin/page").json()
    assert [agent["agent"] for agent in page["agents"]] == ["edited_after_ng_perf"]
    margin = httpx.get(f"{sidecar}/drain_margin", params={"run_id": "standin"}).json()
    assert (margin["samples"], margin["drained"], report["latency"]["samples"]) == (3, 2, 3)
    assert ", 0 refused, 0 not delivered;" in done.stderr


@pytest.mark.parametrize("sidecar_kind", ["none", "refusing", "silent"])
def test_without_a_working_sidecar_the_job_is_unchanged(tmp_path: Path, sidecar_kind: str) -> None:
    """Nothing listening, a sidecar refusing the job's token, one that accepts and never answers."""
    job = write_standin(tmp_path)
    plain = _python([str(job), str(tmp_path / "plain.txt")], tmp_path, url=None)
    with contextlib.ExitStack() as stack:
        if sidecar_kind == "refusing":
            settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite", token=Secret("theirs"))
            url = stack.enter_context(ServiceThread(settings))
        elif sidecar_kind == "silent":
            silent = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
            url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        else:
            url = f"http://127.0.0.1:{free_port()}"
        attached = _python([str(job), str(tmp_path / "attached.txt")], tmp_path, url=url)
    assert plain.returncode == attached.returncode == 0, attached.stderr
    written = [sorted((tmp_path / name).read_text().splitlines()) for name in ("plain.txt", "attached.txt")]
    assert written[0] == written[1] and len(written[0]) == 4
    assert "patched: False" in plain.stdout and "patched: True" in attached.stdout
    lost = re.search(r" 0 events delivered to \S+, (\d+) refused, (\d+) not delivered;", attached.stderr)
    assert lost is not None and int(lost.group(1)) + int(lost.group(2)) == 12, attached.stderr


def test_nothing_is_loaded_or_patched_before_nemo_gym(tmp_path: Path) -> None:
    names = "('httpx', 'pydantic', 'dispatcher_client', 'nemo_gym')"
    probe = f"import sys; print(sorted(m for m in {names} if m in sys.modules))"
    done = _python(
        ["-c", probe + "; print([type(f).__name__ for f in sys.meta_path][0])"], url="http://127.0.0.1:9"
    )
    assert done.stdout.split("\n")[:2] == ["[]", "PostImportFinder"], done.stderr
    write_standin(tmp_path)
    after = _python(["-c", "import nemo_gym; " + probe], tmp_path, url="http://127.0.0.1:9")
    assert after.stdout == "['nemo_gym']\n", after.stderr  # the package alone is not the hooked module


def test_an_existing_sitecustomize_still_runs(tmp_path: Path) -> None:
    theirs = tmp_path / "site"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS'] = 'ran'\n")
    code = "import os, sys; print(os.environ.get('THEIRS'), sys.modules['sitecustomize'].__file__)"
    done = _python(["-c", code], theirs, url="http://127.0.0.1:9")
    assert done.stdout == f"ran {theirs / 'sitecustomize.py'}\n", done.stderr
    assert sitecustomize.URL_ENV == URL_ENV


def test_python_m_and_a_reexecuted_interpreter_are_instrumented(sidecar: str, tmp_path: Path) -> None:
    write_standin(tmp_path)
    (tmp_path / "standin_main.py").write_text(
        "import nemo_gym.rollout_collection as m\n"
        "print(hasattr(m.RolloutCollectionHelper.run_from_config, '__wrapped__'))\n"
    )
    assert _python(["-m", "standin_main"], tmp_path, url=sidecar).stdout == "True\n"
    reexec = (
        f"import os, sys; os.execv(sys.executable, [sys.executable, {str(tmp_path / 'standin_main.py')!r}])"
    )
    assert _python(["-c", reexec], tmp_path, url=sidecar).stdout == "True\n"


@pytest.mark.parametrize(
    ("version", "perf_name", "said"),
    [
        ("0.8.0", "_attach_ng_perf", "NeMo Gym 0.8.0: tested with 0.7.x only"),
        ("0.7.1", "_renamed", "missing _attach_ng_perf"),
    ],
)
def test_another_nemo_gym_runs_unpatched(tmp_path: Path, version: str, perf_name: str, said: str) -> None:
    job = write_standin(tmp_path, version=version, perf_name=perf_name)
    done = _python([str(job), str(tmp_path / "out.txt")], tmp_path, url="http://127.0.0.1:9")
    assert done.returncode == 0 and "patched: False" in done.stdout
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and said in lines[0] and "the job runs unpatched" in lines[0], lines


def test_run_id_rules() -> None:
    output = "/data/run 7/rollouts.jsonl"
    assert (
        run_id_for(output, {RUN_ID_ENV: "given", "NEMO_GYM_OTEL_RUN_ID": "otel", "SLURM_JOB_ID": "9"})
        == "given"
    )
    assert run_id_for(output, {"NEMO_GYM_OTEL_RUN_ID": "otel", "SLURM_JOB_ID": "9"}) == "otel"
    assert run_id_for(output, {"SLURM_JOB_ID": "9"}) == "9-rollouts"
    stamped = run_id_for(output, {})
    assert stamped.startswith("rollouts-") and len(stamped) == len("rollouts-20260101T000000")
    assert run_id_for("/x/my run!.jsonl", {"SLURM_JOB_ID": "12"}) == "12-my-run-"
    assert run_id_for(None, {POOLED_ENV: "1", "NEMO_GYM_OTEL_RUN_ID": "_odd/id"}) == "odd-id"
