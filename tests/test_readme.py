"""The README's client snippet runs as written against a real sidecar."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from sidecar.server import ServiceThread
from sidecar.settings import ServiceSettings

README = Path(__file__).resolve().parents[1] / "README.md"


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
