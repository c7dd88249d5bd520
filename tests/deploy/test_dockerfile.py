"""deploy/Dockerfile, validated without a Docker daemon: structure, and its commands run for real."""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path, PurePosixPath

import httpx
import pytest

from tests.reliability_harness.sidecar_process import free_port

from ._dockerfile import Stage, exec_form, global_args, parse_dockerfile
from .conftest import DEPLOY_DIR, DOCKERFILE, REPO_ROOT

_STAGES = parse_dockerfile(DOCKERFILE)
_RUNTIME = _STAGES[-1]
_ENTRYPOINT = exec_form(_RUNTIME.one("ENTRYPOINT"))


def _option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} should appear once in {argv}"
    return argv[argv.index(name) + 1]


def _healthcheck() -> list[str]:
    _, _, command = _RUNTIME.one("HEALTHCHECK").partition("CMD ")
    assert command, "HEALTHCHECK must use CMD"
    return exec_form(command)


def _copy_sources(stage: Stage) -> list[str]:
    sources: list[str] = []
    for args in stage.all("COPY"):
        words = [w for w in args.split() if not w.startswith("--")]
        sources.extend(words[:-1])
    return sources


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins, ``!`` re-includes (top-level paths suffice here)."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path.rstrip("/"), pattern):
            ignored = not negate
    return ignored


def _executable(name: str) -> str:
    candidate = Path(sys.executable).parent / name
    found = str(candidate) if candidate.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed in this environment (pip install -e .)")
    return found


def _env_without_token() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "ROLLOUT_SIDECAR_TOKEN"}


class TestBuildStage:
    def test_two_stages_on_one_base_image_argument(self) -> None:
        """Slim by default; any python3 base by --build-arg BASE_IMAGE (tests/deploy/test_docker_image.py
        builds it on a Debian one)."""
        assert global_args(DOCKERFILE) == {"BASE_IMAGE": "python:3.11-slim"}
        assert [s.base for s in _STAGES] == ["${BASE_IMAGE}", "${BASE_IMAGE}"]
        assert _STAGES[0].name == "build"

    def test_the_classic_builder_can_build_it(self) -> None:
        """The engine here has only the classic builder: no BuildKit-only syntax."""
        text = DOCKERFILE.read_text(encoding="utf-8")
        assert "# syntax=" not in text
        assert "--mount" not in text

    def test_build_stage_builds_the_wheel_and_installs_it_offline(self) -> None:
        runs = " ".join(_STAGES[0].all("RUN"))
        assert "python -m pip wheel" in runs and "--no-index" in runs
        assert "rollout-sidecar --version" in runs

    def test_runtime_copies_only_the_built_venv(self) -> None:
        copies = _RUNTIME.all("COPY")
        assert copies == ["--from=build /opt/venv /opt/venv"], "the runtime stage must not copy sources"
        assert not [r for r in _RUNTIME.all("RUN") if "pip" in r], "nothing is installed in the runtime stage"
        assert "PATH=/opt/venv/bin:$PATH" in " ".join(_RUNTIME.all("ENV"))

    def test_build_copies_what_the_wheel_needs(self) -> None:
        pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
        packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
        copied = {s.rstrip("/") for s in _copy_sources(_STAGES[0])}
        assert {"pyproject.toml", pyproject["project"]["readme"]} | packages <= copied
        for source in copied:
            assert (REPO_ROOT / source).exists(), f"COPY source {source!r} does not exist"

    def test_dockerignore_keeps_build_inputs_and_drops_the_rest(self) -> None:
        lines = (DEPLOY_DIR / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
        patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
        for source in _copy_sources(_STAGES[0]):
            assert not _ignored(source, patterns), f"{source} is copied but excluded from the context"
        for heavy in (".venv", ".git", "tests", "benchmarks", "deploy/secrets"):
            assert _ignored(heavy, patterns), f"{heavy} would be sent to the build context"


class TestRuntimeStage:
    def test_runs_as_the_unprivileged_user_it_creates(self) -> None:
        user = _RUNTIME.all("USER")[-1]
        uid, _, gid = user.partition(":")
        assert uid.isdigit() and int(uid) != 0, f"USER {user} must be a numeric non-root uid"
        setup = " ".join(_RUNTIME.all("RUN"))
        assert f"--uid {uid}" in setup and f"--gid {gid or uid}" in setup

    def test_state_directory_is_a_volume_owned_by_that_user(self) -> None:
        volumes = exec_form(_RUNTIME.one("VOLUME"))
        journal = PurePosixPath(_option(_ENTRYPOINT, "--journal"))
        assert str(journal.parent) in volumes
        uid = _RUNTIME.all("USER")[-1].split(":")[0]
        assert f"install -d -o {uid} -g {uid}" in " ".join(_RUNTIME.all("RUN"))
        assert f"{journal.parent}" in " ".join(_RUNTIME.all("RUN"))

    def test_entrypoint_serves_beyond_loopback_with_a_token_secret(self) -> None:
        assert _ENTRYPOINT[:2] == ["rollout-sidecar", "serve"]
        assert _option(_ENTRYPOINT, "--host") == "0.0.0.0"
        assert _option(_ENTRYPOINT, "--token-file").startswith("/run/secrets/")

    def test_exposed_port_is_served_and_health_checked(self) -> None:
        port = _option(_ENTRYPOINT, "--port")
        assert _RUNTIME.one("EXPOSE") == port
        check = _healthcheck()
        assert check[:2] == ["python", "-c"], "slim has no curl: the check must be python"
        assert f"http://127.0.0.1:{port}/healthz" in check[2]


class TestCommandsRunForReal:
    """The image's ENTRYPOINT and HEALTHCHECK, run on this host with paths and port substituted."""

    def _argv(self, tmp_path: Path, port: int, *, token: bool = True) -> list[str]:
        argv = list(_ENTRYPOINT)
        argv[0] = _executable(argv[0])
        argv[argv.index("--port") + 1] = str(port)
        argv[argv.index("--journal") + 1] = str(tmp_path / "state" / "journal.sqlite3")
        (tmp_path / "state").mkdir(exist_ok=True)
        at = argv.index("--token-file")
        if token:
            secret = tmp_path / "sidecar_token"
            secret.write_text("s3cret-token-for-test\n", encoding="utf-8")
            argv[at + 1] = str(secret)
        else:
            del argv[at : at + 2]
        return argv

    def _run_healthcheck(self, port: int) -> int:
        check = _healthcheck()
        code = check[2].replace("127.0.0.1:" + _option(_ENTRYPOINT, "--port"), f"127.0.0.1:{port}")
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30, check=False)
        return result.returncode

    def test_entrypoint_serves_and_healthcheck_tracks_it(self, tmp_path: Path) -> None:
        port = free_port()
        process = subprocess.Popen(
            self._argv(tmp_path, port),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=_env_without_token(),
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the entrypoint did not serve /healthz within 30 s"
                time.sleep(0.2)
            assert self._run_healthcheck(port) == 0
            assert (tmp_path / "state" / "journal.sqlite3").exists()
        finally:
            process.terminate()
            process.wait(timeout=30)
            if process.stderr:
                process.stderr.close()
        assert self._run_healthcheck(port) != 0, "the healthcheck must fail once the service is gone"

    def test_entrypoint_refuses_to_bind_beyond_loopback_without_the_token(self, tmp_path: Path) -> None:
        result = subprocess.run(
            self._argv(tmp_path, free_port(), token=False),
            capture_output=True,
            text=True,
            timeout=60,
            env=_env_without_token(),
            check=False,
        )
        assert result.returncode != 0
        assert "token" in (result.stderr + result.stdout).lower()
