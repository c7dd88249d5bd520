"""The public surface of each package: ``__all__`` is unique and importable (ruff sorts it).

A name leaves or joins the public API only on purpose, with this test updated beside it.
"""

from __future__ import annotations

import importlib

import pytest

PUBLIC_MODULES = [
    "health",
    "health.contract",
    "health.digest",
    "sidecar.demo.agent",
    "sidecar.wire",
    "sidecar.journal",
    "sidecar.http.openapi",
    "sidecar.perf",
    "sidecar.http.responses",
    "sidecar.export.trackers",
    "sidecar.wire",
    "dispatcher_client",
]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_unique_and_resolvable(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    missing = [member for member in exported if not hasattr(module, member)]
    assert not missing, f"{name}.__all__ names what the module does not define: {missing}"


def test_health_public_api_is_the_documented_one() -> None:
    import health

    documented = {"health_check_run_dir", "run_health_checks", "normalize_ignored_checks", "HealthReducer"}
    assert documented <= set(health.__all__)


def test_dispatcher_client_exports_the_client_and_the_tracker() -> None:
    import dispatcher_client

    assert {"SidecarClient", "RemoteLatencyTracker"} <= set(dispatcher_client.__all__)
