"""A real MLflow tracking server (SQLite backend, local artifact root) on 127.0.0.1, and an
isolated W&B offline environment; each skips with its reason when its extra is missing."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.reliability_harness.sidecar_process import free_port


class MlflowServer:
    """``mlflow server`` as a child process; :meth:`stop` and :meth:`start` again keep its store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 90.0) -> None:
        mlflow = Path(sys.executable).with_name("mlflow")
        command = [str(mlflow)] if mlflow.exists() else [sys.executable, "-m", "mlflow"]
        log = (self.root / "server.log").open("ab")
        self._process = subprocess.Popen(
            [*command, "server", "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
             "--default-artifact-root", str(self.root / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=self.root, start_new_session=True,
            env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"},
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(
            f"mlflow server not up in {timeout_s} s: {(self.root / 'server.log').read_text()[-2000:]}"
        )

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self) -> None:
        """SIGTERM to its process group (the server runs its workers as children), SIGKILL if slow."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, 9)
            process.wait(10)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install '.[mlflow]'")
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def mlflow_env(monkeypatch: pytest.MonkeyPatch, mlflow_server: MlflowServer) -> MlflowServer:
    """The client's retries off (as the sidecar sets them unless given), the server's URI set."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.url)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")  # loopback only: nothing leaves the machine
    return mlflow_server


@pytest.fixture
def wandb_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """W&B in offline mode with every directory it writes under ``tmp_path``: nothing leaves the
    machine or lands in the home directory. Yields ``WANDB_DIR``; afterwards wandb's process-wide
    state (which keeps the first directories it saw) is torn down for the next test."""
    wandb = pytest.importorskip("wandb", reason="the wandb extra is not installed: pip install '.[wandb]'")
    root = tmp_path / "wandb-env"
    for name in ("dir", "data", "cache", "config", "artifacts"):
        (root / name).mkdir(parents=True)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(root / "dir"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(root / "data"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(root / "cache"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(root / "config"))
    monkeypatch.setenv("WANDB_ARTIFACT_DIR", str(root / "artifacts"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    wandb.teardown()
    yield root / "dir"
    wandb.teardown()


def wandb_run_dirs(wandb_dir: Path) -> list[Path]:
    return sorted((wandb_dir / "wandb").glob("offline-run-*"))


__all__ = ["MlflowServer", "wandb_run_dirs"]
