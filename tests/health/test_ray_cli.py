"""``health-check --ray``: the CLI on a cluster made with ``ray start``, and without Ray installed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.cli import main
from tests.dispatcher_client.support import free_port

from .shard_corpus import write_shards

REPORTS = ("quality_summary.json", "rollout_verdicts.jsonl")
BIN = Path(sys.executable).parent
# A throwaway cluster on this machine: no usage report, and no token (recent Ray enables token
# auth for `ray start`; a driver given an explicit address would need the token).
RAY_ENV = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")


def test_without_ray_one_line_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_shards(tmp_path / "run", shards=1)
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    assert main(["health-check", str(tmp_path / "run"), "--glob", "*.jsonl", "--ray", "auto"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "rollout-sidecar health-check: error: --ray needs Ray: pip install '.[ray]' in the rollout-sidecar "
        "clone (it is not on PyPI)\n"
    )
    assert not (tmp_path / "run" / "quality_summary.json").exists()


def test_unreachable_address_fails_fast(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
    write_shards(tmp_path / "run", shards=1)
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    assert main(["health-check", str(tmp_path / "run"), "--glob", "*.jsonl", "--ray", address]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rollout-sidecar health-check: error: cannot join the Ray cluster at '{address}'")
    assert err.count("\n") == 1


def _alive_nodes(address: str) -> int:
    probe = (
        f"import ray; ray.init(address={address!r}, log_to_driver=False, logging_level='ERROR');"
        "print(sum(1 for n in ray.nodes() if n['Alive']))"
    )
    command = [sys.executable, "-c", probe]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False, env=RAY_ENV)
    except subprocess.TimeoutExpired:
        return 0
    return int(done.stdout.strip() or 0) if done.returncode == 0 else 0


def _start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [str(BIN / "ray"), "start", "--block", "--num-cpus=1", "--object-store-memory=80000000", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=RAY_ENV,
        start_new_session=True,  # its own process group, stopped by id below
    )


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    if process.stderr is not None:
        process.stderr.close()


@pytest.fixture
def ray_start_cluster() -> Iterator[str]:
    """``ray start --head`` plus a second ``ray start --address``; yields the cluster address."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
    if not (BIN / "ray").exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    from ray._private.services import get_node_ip_address

    address = f"{get_node_ip_address()}:{free_port()}"
    port = address.rsplit(":", 1)[1]
    started = [_start(["--head", f"--port={port}", "--include-dashboard=false"])]
    try:
        deadline = time.monotonic() + 120
        while _alive_nodes(address) < 1:
            if started[0].poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"ray start --head did not come up: {started[0].stderr.read()[-300:]!r}")  # type: ignore[union-attr]
        started.append(_start([f"--address={address}"]))
        while _alive_nodes(address) < 2:
            if started[1].poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"ray start --address did not join: {started[1].stderr.read()[-300:]!r}")  # type: ignore[union-attr]
        yield address
    finally:
        for process in reversed(started):
            _stop(process)


def test_cli_on_a_ray_start_cluster(ray_start_cluster: str, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    write_shards(run_dir, tasks=30, pad=4000)
    expected = tmp_path / "expected"
    local = [str(BIN / "rollout-sidecar"), "health-check", str(run_dir), "--glob", "rollouts-*.jsonl"]
    subprocess.run([*local, "--workers", "1"], check=True, capture_output=True)
    expected.mkdir()
    for name in REPORTS:
        (run_dir / name).rename(expected / name)
    done = subprocess.run(
        [*local, "--ray", ray_start_cluster],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=RAY_ENV,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("Rollout health: ")
    for name in REPORTS:
        assert (run_dir / name).read_bytes() == (expected / name).read_bytes(), name
