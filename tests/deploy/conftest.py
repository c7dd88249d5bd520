"""Fixtures for the deploy tests: the files under deploy/ and docker-compose.yml, parsed once."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DIR = REPO_ROOT / "deploy"
PROMETHEUS_DIR = DEPLOY_DIR / "prometheus"
RULE_FILES = sorted((PROMETHEUS_DIR / "rules").glob("*.yml"))
RULE_TEST_FILES = sorted((PROMETHEUS_DIR / "tests").glob("*.yml"))
DASHBOARD_FILE = DEPLOY_DIR / "grafana" / "dashboards" / "rollout-sidecar.json"
DATASOURCES_FILE = DEPLOY_DIR / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
DASHBOARD_PROVIDER_FILE = DEPLOY_DIR / "grafana" / "provisioning" / "dashboards" / "rollout-sidecar.yml"
METRIC_NAMES_FILE = DEPLOY_DIR / "metric_names.txt"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = DEPLOY_DIR / "Dockerfile"
OPERATIONS_DOC = REPO_ROOT / "docs" / "operations.md"


def load_yaml(path: Path) -> Any:
    """Parse one YAML file; a missing or empty file fails the test that asked for it."""
    with path.open(encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    assert data is not None, f"{path} is empty"
    return data


def rules_of(kind: str) -> list[dict[str, Any]]:
    """Every rule of ``kind`` ("record" or "alert") across deploy/prometheus/rules/*.yml."""
    found: list[dict[str, Any]] = []
    for path in RULE_FILES:
        for group in load_yaml(path)["groups"]:
            found.extend(rule for rule in group["rules"] if kind in rule)
    return found


def dashboard_targets(dashboard: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(panel title, target)`` for every query target of every panel, rows included."""
    found: list[tuple[str, dict[str, Any]]] = []
    stack = list(dashboard["panels"])
    while stack:
        panel = stack.pop(0)
        stack.extend(panel.get("panels", []))
        found.extend((panel["title"], target) for target in panel.get("targets", []))
    return found


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool (Debian package ``prometheus``); the test is skipped without it."""
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool not installed (apt-get install prometheus); .ci/run installs it")
    return path


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    data = load_yaml(COMPOSE_FILE)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="session")
def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="session")
def datasources() -> list[dict[str, Any]]:
    data = load_yaml(DATASOURCES_FILE)
    assert data["apiVersion"] == 1
    sources: list[dict[str, Any]] = data["datasources"]
    return sources


@pytest.fixture(scope="session")
def contract_names() -> list[str]:
    """deploy/metric_names.txt: the series names of the metrics contract, one per line."""
    return METRIC_NAMES_FILE.read_text(encoding="utf-8").splitlines()
