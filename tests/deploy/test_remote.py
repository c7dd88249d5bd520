"""A sidecar on another host: the example unit runs as written (token required for events, not
for reads), the example Prometheus config scrapes it, and init-secrets makes compose's token."""

from __future__ import annotations

import configparser
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from dispatcher_client import RemoteLatencyTracker, SyncSidecarClient
from sidecar.cli import main as cli_main
from sidecar.http.settings import load_token
from tests.dispatcher_client.support import SidecarProcess, free_port

from .conftest import COMPOSE_FILE, DEPLOY_DIR, load_yaml

UNIT = DEPLOY_DIR / "remote" / "rollout-sidecar.service"
REMOTE_PROMETHEUS = DEPLOY_DIR / "remote" / "prometheus.yml"
INIT_SECRETS = DEPLOY_DIR / "init-secrets.sh"
REPO = DEPLOY_DIR.parent
_PREFIX = "/opt/rollout-sidecar"


def _unit_service() -> configparser.SectionProxy:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.read(UNIT, encoding="utf-8")
    return unit["Service"]


def _exec_start() -> dict[str, str]:
    """The unit's ``serve`` options, as ``{"--host": "0.0.0.0", ...}``."""
    argv = shlex.split(_unit_service()["ExecStart"])
    assert argv[0].endswith("/rollout-sidecar") and argv[1] == "serve", argv
    options = argv[2:]
    assert len(options) % 2 == 0, options
    return dict(zip(options[::2], options[1::2], strict=True))


def _install_steps() -> list[str]:
    """The header's install commands that build what ``ExecStart`` runs (those under ``/opt``)."""
    text = UNIT.read_text(encoding="utf-8")
    steps = re.findall(r"^#   (.+)$", text, re.M)
    return [step for step in steps if _PREFIX in step]


def test_the_install_steps_create_the_venv_the_unit_runs() -> None:
    binary = shlex.split(_unit_service()["ExecStart"])[0]
    venv = binary.removesuffix("/bin/rollout-sidecar")
    steps = [shlex.split(step, comments=True) for step in _install_steps()]
    assert ["sudo", "python3", "-m", "venv", venv] in steps
    assert ["sudo", f"{venv}/bin/pip", "install", "."] in steps  # from the clone: not on PyPI


@pytest.mark.timeout(900)
def test_the_install_steps_run_and_the_unit_starts_from_their_venv(tmp_path: Path) -> None:
    """Run the documented steps (``/opt/rollout-sidecar`` moved under tmp, no sudo) in this
    clone, then the unit's ExecStart from the venv they made, outside the clone."""
    prefix = str(tmp_path / "opt")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    for step in _install_steps():
        command = step.replace(_PREFIX, prefix).removeprefix("sudo ")
        done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    argv = shlex.split(_unit_service()["ExecStart"].replace(_PREFIX, prefix))
    port = str(free_port())
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-from-the-unit\n")
    swapped = {"--port": port, "--token-file": str(token_file), "--journal": str(tmp_path / "j.sqlite3")}
    argv = [swapped.get(argv[index - 1], word) if index else word for index, word in enumerate(argv)]
    log = tmp_path / "serve.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        health = None
        for _ in range(600):  # until it listens (or exits): polled, not timed
            if process.poll() is not None:
                break
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0)
                break
            except httpx.TransportError:
                time.sleep(0.1)
        assert health is not None and health.status_code == 200, log.read_text()
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics").text
        assert 'rollout_sidecar_build_info{version="' in metrics and 'version="unknown"' not in metrics
    finally:
        process.terminate()
        process.wait(30)


def test_the_unit_listens_beyond_loopback_with_a_token() -> None:
    options = _exec_start()
    assert options["--host"] == "0.0.0.0"
    assert set(options) == {"--host", "--port", "--token-file", "--journal"}


def test_without_its_token_the_same_command_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ROLLOUT_SIDECAR_TOKEN", raising=False)
    options = _exec_start()
    argv = ["serve", "--host", options["--host"], "--port", str(free_port())]
    assert cli_main([*argv, "--journal", str(tmp_path / "j.sqlite3")]) == 2
    assert "refusing to bind non-loopback address '0.0.0.0' without a bearer token" in capsys.readouterr().err


def test_the_unit_serves_remote_dispatchers_and_open_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = _exec_start()
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-from-the-unit\n")
    extra = ("--host", options["--host"], "--token-file", str(token_file))
    with SidecarProcess(tmp_path / "journal.sqlite3", extra_args=extra) as url:
        # What a dispatcher on another host does: the URL of the sidecar host, the token from the env.
        monkeypatch.setenv("ROLLOUT_SIDECAR_TOKEN", "s3cret-from-the-unit")
        with RemoteLatencyTracker(url, run_id="remote-host", dispatch_budget_s=3600) as tracker:
            for seconds in (10.0, 20.0, 30.0, 40.0, 50.0):
                tracker.record(seconds)
            assert tracker.flush(10)
            assert (tracker.stats.sent, tracker.stats.rejected) == (6, 0)
        monkeypatch.delenv("ROLLOUT_SIDECAR_TOKEN")
        with SyncSidecarClient(url, run_id="remote-host") as anonymous:
            anonymous.drained({"_ng_task_index": 0, "_ng_rollout_index": 0})
            assert anonymous.flush(10)
            assert (anonymous.stats.sent, anonymous.stats.rejected) == (0, 1)  # writes need the token
        # Reads need none: Prometheus, dashboards and `rollout-sidecar report` read without it.
        params = {"run_id": "remote-host"}
        assert httpx.get(f"{url}/metrics").status_code == 200
        assert httpx.get(f"{url}/drain_margin", params=params).json()["samples"] == 5
        assert httpx.get(f"{url}/report", params=params).status_code == 200
        assert httpx.post(f"{url}/v1/runs/x/events", json=[{"kind": "run_ended"}]).status_code == 401


def test_the_remote_prometheus_config_scrapes_the_units_port() -> None:
    config = load_yaml(REMOTE_PROMETHEUS)
    [job] = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    assert "authorization" not in job and "basic_auth" not in job  # /metrics needs no token
    [target] = job["static_configs"][0]["targets"]
    assert target.rsplit(":", 1)[1] == _exec_start()["--port"]
    rules = sorted((REMOTE_PROMETHEUS.parent).glob(config["rule_files"][0]))
    assert [path.name for path in rules] == ["alerts.yml", "recording.yml"]


def test_promtool_accepts_the_remote_prometheus_config(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "check", "config", str(REMOTE_PROMETHEUS)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


class TestInitSecrets:
    def _copy(self, tmp_path: Path) -> Path:
        deploy = tmp_path / "deploy"
        deploy.mkdir()
        script = deploy / "init-secrets.sh"
        script.write_bytes(INIT_SECRETS.read_bytes())
        return script

    def test_creates_the_token_compose_mounts_and_keeps_it(self, tmp_path: Path) -> None:
        script = self._copy(tmp_path)
        first = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
        token = tmp_path / "deploy" / "secrets" / "sidecar_token"
        assert first.stdout == f"created {token}\n"
        assert (token.stat().st_mode & 0o777, token.parent.stat().st_mode & 0o777) == (0o644, 0o700)
        value = token.read_text()
        assert len(value.strip()) >= 40 and value.endswith("\n")
        again = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=True)
        assert again.stdout == f"kept the existing token: {token}\n" and token.read_text() == value
        compose = load_yaml(COMPOSE_FILE)
        assert compose["secrets"]["sidecar_token"]["file"] == "./deploy/secrets/sidecar_token"

    def test_the_token_is_one_the_sidecar_reads(self, tmp_path: Path) -> None:
        script = self._copy(tmp_path)
        subprocess.run(["bash", str(script)], capture_output=True, check=True)
        secret = load_token(tmp_path / "deploy" / "secrets" / "sidecar_token", env={})
        assert secret is not None and len(secret.get()) >= 40
