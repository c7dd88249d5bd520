"""deploy/Dockerfile built for real and run: uid 10001 on a read-only root, its HEALTHCHECK,
the journal across a container restart, and the native vetter.

Base images cannot be pulled here, so the image is built on a base made from Debian packages
(``debootstrap --variant=minbase``, then ``docker import``), passed as ``BASE_IMAGE``: the same
Dockerfile builds on the official ``python:3.11-slim``. The base is cached by its tag
(:data:`BASE_TAG`; a few minutes the first time). It carries this machine's CA bundle, so pip
in the build trusts whatever TLS proxy this machine trusts. Skipped with a reason where the
Docker engine or debootstrap is missing or cannot start (``.ci/run`` installs and starts both).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.reliability_harness.sidecar_process import free_port

from ..sidecar.service_support import generate_run
from .conftest import DOCKERFILE, REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

BASE_TAG = "rollout-sidecar-base:bookworm"
"""The Debian base, made once per machine and reused."""
IMAGE_TAG = "rollout-sidecar:test-image"
_PACKAGES = "python3,python3-venv,python3-pip,ca-certificates"
_MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")
_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
_TOKEN = "docker-image-test-token"
_RUN = "docker-run"


def _docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and completed.returncode != 0:
        pytest.fail(
            f"docker {' '.join(args[:3])} failed ({completed.returncode}): {completed.stderr[-2000:]}"
        )
    return completed


def _engine_or_skip() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI (.ci/run installs Debian's docker.io)")
    try:
        info = _docker("info", "--format", "{{.ServerVersion}}", timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("the Docker engine did not answer `docker info` within 30 s")
    if info.returncode != 0:
        reason = (info.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"the Docker engine is not running (`docker info`: {reason})")


def _base_image() -> str:
    """:data:`BASE_TAG`, made with debootstrap where the engine does not have it yet."""
    if _docker("image", "inspect", BASE_TAG, check=False).returncode == 0:
        return BASE_TAG
    if shutil.which("debootstrap") is None:
        pytest.skip(f"no {BASE_TAG} image and no debootstrap to make it (.ci/run installs it)")
    if os.geteuid() != 0:
        pytest.skip(f"no {BASE_TAG} image, and debootstrap needs root to make it")
    with tempfile.TemporaryDirectory(prefix="rollout-sidecar-base-") as scratch:
        root = Path(scratch) / "root"
        made = subprocess.run(
            ["debootstrap", "--variant=minbase", f"--include={_PACKAGES}", "bookworm", str(root), _MIRROR],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
        if made.returncode != 0:
            pytest.skip(
                f"debootstrap could not make the base ({made.returncode}): {made.stderr.strip()[-300:]}"
            )
        if _CA_BUNDLE.is_file():  # trust what this machine trusts (a TLS-intercepting proxy)
            shutil.copyfile(_CA_BUNDLE, root / _CA_BUNDLE.relative_to("/"))
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        imported = subprocess.run(
            ["docker", "import", "-", BASE_TAG],
            stdin=tar.stdout,
            capture_output=True,
            timeout=600,
            check=False,
        )
        assert tar.stdout is not None
        tar.stdout.close()
        tar.wait()
        if imported.returncode != 0:
            pytest.fail(f"docker import failed: {imported.stderr.decode(errors='replace')[-2000:]}")
    return BASE_TAG


def _build_context(into: Path) -> None:
    """What the wheel needs (the files deploy/Dockerfile.dockerignore keeps), tracked files
    only: the classic builder sends the whole context directory and reads no per-Dockerfile
    ignore file."""
    listed = subprocess.run(
        [
            "git",
            "ls-files",
            "-z",
            "pyproject.toml",
            "README.md",
            "health",
            "sidecar",
            "dispatcher_client",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    )
    for name in filter(None, listed.stdout.decode().split("\0")):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / name, target)
    shutil.copyfile(DOCKERFILE, into / "Dockerfile")


@pytest.fixture(scope="module")
def image() -> str:
    _engine_or_skip()
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("the build context is made from git's tracked files: no git checkout here")
    base = _base_image()
    with tempfile.TemporaryDirectory(prefix="rollout-sidecar-context-") as context:
        _build_context(Path(context))
        build_args = ["--build-arg", f"BASE_IMAGE={base}", "--build-arg", f"PIP_CERT={_CA_BUNDLE}"]
        if os.environ.get("PIP_INDEX_URL"):
            build_args += ["--build-arg", f"PIP_INDEX_URL={os.environ['PIP_INDEX_URL']}"]
        built = _docker("build", *build_args, "-t", IMAGE_TAG, context, timeout=1800, check=False)
        if built.returncode != 0:
            pytest.fail(f"docker build failed:\n{built.stdout[-3000:]}\n{built.stderr[-3000:]}")
    return IMAGE_TAG


class _Container:
    """One container of the image, as deploy/ runs it: read-only root, a tmpfs /tmp, the
    journal on a volume, the token as a secret file, the port on 127.0.0.1 only."""

    def __init__(self, image: str, secrets: Path) -> None:
        self.name = f"rollout-sidecar-test-{uuid.uuid4().hex[:10]}"
        self.volume = f"{self.name}-state"
        self.port = free_port()
        token_file = secrets / "sidecar_token"
        token_file.write_text(_TOKEN + "\n", encoding="utf-8")
        token_file.chmod(0o644)
        _docker("volume", "create", self.volume)
        _docker(
            "run", "--detach", "--name", self.name, "--read-only", "--tmpfs", "/tmp",
            "--volume", f"{self.volume}:/var/lib/rollout-sidecar",
            "--volume", f"{token_file}:/run/secrets/sidecar_token:ro",
            "--publish", f"127.0.0.1:{self.port}:9400",
            image,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}"

    def health(self) -> str:
        return _docker("inspect", "--format", "{{.State.Health.Status}}", self.name).stdout.strip()

    def wait_healthy(self, within_s: float = 240) -> None:
        """Until the engine runs the image's HEALTHCHECK and finds it healthy (a bounded wait
        for a state, not a timed assert: the check runs every 10 s after a 15 s start period)."""
        deadline = time.monotonic() + within_s
        status = self.health()
        while status != "healthy" and time.monotonic() < deadline:
            if (
                status == "unhealthy"
                or _docker("inspect", "--format", "{{.State.Running}}", self.name).stdout.strip() != "true"
            ):
                break
            time.sleep(1)
            status = self.health()
        if status != "healthy":
            logs = _docker("logs", "--tail", "40", self.name, check=False)
            pytest.fail(f"container health {status!r}; logs:\n{logs.stdout[-2000:]}\n{logs.stderr[-2000:]}")

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return _docker("exec", self.name, *argv, check=False)

    def remove(self) -> None:
        _docker("rm", "--force", self.name, check=False)
        _docker("volume", "rm", "--force", self.volume, check=False)


@pytest.fixture(scope="module")
def container(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Container]:
    running = _Container(image, tmp_path_factory.mktemp("secrets"))
    try:
        running.wait_healthy()
        yield running
    finally:
        running.remove()


def _auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {_TOKEN}"}


def _report(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/report", params={"run_id": _RUN}, headers=_auth(), timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    body["latency"].pop("completions_per_hour")  # moves with the time of the request
    return body


def test_runs_as_uid_10001_on_a_read_only_root(container: _Container) -> None:
    assert _docker("inspect", "--format", "{{.Config.User}}", IMAGE_TAG).stdout.strip() == "10001:10001"
    assert container.exec("id", "-u").stdout.strip() == "10001"
    assert (
        _docker("inspect", "--format", "{{.HostConfig.ReadonlyRootfs}}", container.name).stdout.strip()
        == "true"
    )
    refused = container.exec("sh", "-c", "touch /opt/venv/written")
    assert refused.returncode != 0 and "Read-only file system" in refused.stderr
    # the journal's volume and /tmp are the writable places
    assert container.exec("sh", "-c", "touch /tmp/x && ls /var/lib/rollout-sidecar").returncode == 0


def test_passes_its_healthcheck(container: _Container) -> None:
    assert container.health() == "healthy"
    assert httpx.get(f"{container.url}/healthz", timeout=10).status_code == 200


def test_reports_its_version(container: _Container) -> None:
    version = container.exec("rollout-sidecar", "--version")
    assert version.returncode == 0, version.stderr
    assert version.stdout.startswith("rollout-sidecar ")


def test_keeps_the_journal_across_a_restart(container: _Container) -> None:
    run = generate_run(num_tasks=8, repeats=2, payload_bytes_per_call=128)
    start = {"kind": "run_started", "plan": run.plan}
    with httpx.Client(base_url=container.url, headers=_auth(), timeout=30) as client:
        for batch in ([start], *(run.events[i : i + 20] for i in range(0, len(run.events), 20))):
            response = client.post(f"/v1/runs/{_RUN}/events", json=list(batch))
            assert response.status_code == 200, response.text
    before = _report(container.url)
    assert before["latency"]["samples"] > 0 and before["quality_summary"], before
    _docker("restart", "--time", "20", container.name)
    container.wait_healthy()
    assert _report(container.url) == before
