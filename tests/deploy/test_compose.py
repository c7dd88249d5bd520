"""docker-compose.yml, validated without a Docker daemon: every reference resolves and agrees."""

from __future__ import annotations

import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from ._dockerfile import exec_form, parse_dockerfile
from .conftest import (
    DASHBOARD_FILE,
    DASHBOARD_PROVIDER_FILE,
    DATASOURCES_FILE,
    DOCKERFILE,
    PROMETHEUS_DIR,
    REPO_ROOT,
    load_yaml,
)

_RUNTIME = parse_dockerfile(DOCKERFILE)[-1]
_ENTRYPOINT = exec_form(_RUNTIME.one("ENTRYPOINT"))


def _option(argv: list[str], name: str) -> str:
    prefix = f"{name}="
    for index, arg in enumerate(argv):
        if arg == name:
            return argv[index + 1]
        if arg.startswith(prefix):
            return arg[len(prefix) :]
    raise AssertionError(f"{name} not in {argv}")


def _binds(service: dict[str, Any]) -> list[tuple[Path, PurePosixPath]]:
    """(host path, container path) of the service's bind mounts (short syntax, ``./`` sources)."""
    found = []
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith((".", "/")):
            found.append(((REPO_ROOT / source).resolve(), PurePosixPath(target)))
    return found


def _host_path(service: dict[str, Any], container_path: str) -> Path:
    """Where ``container_path`` comes from on the host, through the service's bind mounts."""
    path = PurePosixPath(container_path)
    for host, target in _binds(service):
        if path == target or target in path.parents:
            return host.joinpath(*path.relative_to(target).parts)
    raise AssertionError(f"{container_path} is not inside any bind mount of {service}")


def _published(service: dict[str, Any]) -> dict[int, str]:
    """container port -> host address of each published port."""
    found = {}
    for port in service.get("ports", []):
        host_ip, host_port, container_port = str(port).split(":")
        assert host_port == container_port, port
        found[int(container_port)] = host_ip
    return found


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


class TestServices:
    def test_the_three_services(self, services: dict[str, dict[str, Any]]) -> None:
        assert set(services) == {"sidecar", "prometheus", "grafana"}

    def test_images_are_pinned(self, services: dict[str, dict[str, Any]]) -> None:
        for name, service in services.items():
            image = service["image"]
            repository, _, tag = image.rpartition(":")
            assert repository and tag and tag != "latest", f"{name}: pin the image tag ({image})"

    def test_ports_are_published_on_loopback_only(self, services: dict[str, dict[str, Any]]) -> None:
        for name, service in services.items():
            assert service.get("ports"), f"{name} publishes no port"
            assert set(_published(service).values()) == {"127.0.0.1"}, name

    def test_bind_mount_sources_exist(self, services: dict[str, dict[str, Any]]) -> None:
        for name, service in services.items():
            for host, _ in _binds(service):
                assert host.exists(), f"{name}: bind source {host} does not exist"
                assert REPO_ROOT in host.parents, f"{name}: bind source {host} is outside the repository"

    def test_named_volumes_are_declared(
        self, compose: dict[str, Any], services: dict[str, dict[str, Any]]
    ) -> None:
        used = {
            volume.split(":")[0]
            for service in services.values()
            for volume in service.get("volumes", [])
            if not volume.startswith((".", "/"))
        }
        assert used and used <= set(compose["volumes"])


class TestSidecar:
    def test_built_from_the_dockerfile(self, services: dict[str, dict[str, Any]]) -> None:
        build = services["sidecar"]["build"]
        assert (REPO_ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE

    def test_publishes_the_served_port(self, services: dict[str, dict[str, Any]]) -> None:
        assert set(_published(services["sidecar"])) == {int(_option(_ENTRYPOINT, "--port"))}

    def test_state_volume_holds_the_journal(self, services: dict[str, dict[str, Any]]) -> None:
        journal_dir = str(PurePosixPath(_option(_ENTRYPOINT, "--journal")).parent)
        targets = {v.split(":")[1] for v in services["sidecar"]["volumes"] if not v.startswith((".", "/"))}
        assert journal_dir in targets
        assert journal_dir in exec_form(_RUNTIME.one("VOLUME"))

    def test_token_secret_is_mounted_where_the_entrypoint_reads_it(
        self, compose: dict[str, Any], services: dict[str, dict[str, Any]]
    ) -> None:
        token_file = PurePosixPath(_option(_ENTRYPOINT, "--token-file"))
        assert token_file.parent == PurePosixPath("/run/secrets")
        assert token_file.name in services["sidecar"]["secrets"]
        assert token_file.name in compose["secrets"]

    def test_token_file_is_never_committed(self, compose: dict[str, Any]) -> None:
        for name, secret in compose["secrets"].items():
            path = REPO_ROOT / secret["file"]
            ignored = subprocess.run(
                ["git", "check-ignore", "--quiet", str(path)], cwd=REPO_ROOT, check=False
            ).returncode
            assert ignored == 0, f"secret {name} at {path} is not git-ignored"

    def test_hardened(self, services: dict[str, dict[str, Any]]) -> None:
        sidecar = services["sidecar"]
        assert sidecar["read_only"] is True
        assert "/tmp" in sidecar["tmpfs"]
        assert sidecar["cap_drop"] == ["ALL"]


class TestPrometheus:
    def test_config_is_the_repository_file(self, services: dict[str, dict[str, Any]]) -> None:
        prometheus = services["prometheus"]
        config = _option(prometheus["command"], "--config.file")
        assert _host_path(prometheus, config) == (PROMETHEUS_DIR / "prometheus.yml").resolve()

    def test_storage_is_a_named_volume(self, services: dict[str, dict[str, Any]]) -> None:
        prometheus = services["prometheus"]
        storage = _option(prometheus["command"], "--storage.tsdb.path")
        assert any(v.split(":")[1] == storage and not v.startswith(".") for v in prometheus["volumes"])

    def test_publishes_its_listen_port(self, services: dict[str, dict[str, Any]]) -> None:
        prometheus = services["prometheus"]
        port = int(_option(prometheus["command"], "--web.listen-address").rpartition(":")[2])
        assert set(_published(prometheus)) == {port}

    def test_scrapes_the_sidecar_service(self, services: dict[str, dict[str, Any]]) -> None:
        config = load_yaml(PROMETHEUS_DIR / "prometheus.yml")
        (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "rollout-sidecar"]
        targets = [t for group in job["static_configs"] for t in group["targets"]]
        assert targets == [f"sidecar:{_option(_ENTRYPOINT, '--port')}"]
        assert job.get("metrics_path", "/metrics") == "/metrics"
        assert "sidecar" in services


class TestGrafana:
    def test_provisioning_directory_is_mounted(self, services: dict[str, dict[str, Any]]) -> None:
        grafana = services["grafana"]
        assert _host_path(grafana, "/etc/grafana/provisioning/datasources/prometheus.yml") == DATASOURCES_FILE
        assert (
            _host_path(grafana, "/etc/grafana/provisioning/dashboards/rollout-sidecar.yml")
            == DASHBOARD_PROVIDER_FILE
        )

    def test_dashboard_provider_path_holds_the_dashboard(self, services: dict[str, dict[str, Any]]) -> None:
        provider = load_yaml(DASHBOARD_PROVIDER_FILE)
        assert provider["apiVersion"] == 1
        (entry,) = provider["providers"]
        assert entry["type"] == "file"
        folder = _host_path(services["grafana"], entry["options"]["path"])
        assert DASHBOARD_FILE in folder.glob("*.json")

    def test_home_dashboard_is_the_provisioned_file(self, services: dict[str, dict[str, Any]]) -> None:
        grafana = services["grafana"]
        home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
        assert _host_path(grafana, home) == DASHBOARD_FILE

    def test_datasource_is_the_compose_prometheus(
        self, services: dict[str, dict[str, Any]], datasources: list[dict[str, Any]]
    ) -> None:
        (source,) = datasources
        assert source["type"] == "prometheus" and source["isDefault"] is True
        port = _option(services["prometheus"]["command"], "--web.listen-address").rpartition(":")[2]
        assert source["url"] == f"http://prometheus:{port}"

    def test_no_login_needed_to_view(self, services: dict[str, dict[str, Any]]) -> None:
        environment = services["grafana"]["environment"]
        assert environment["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
        assert environment["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
