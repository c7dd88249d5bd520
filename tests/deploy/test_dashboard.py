"""The Grafana dashboard JSON: it parses, points at the provisioned datasource and lays out cleanly."""

from __future__ import annotations

from typing import Any

import pytest

from ._promql import metric_names
from .conftest import dashboard_targets


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    stack = list(dashboard["panels"])
    while stack:
        panel = stack.pop(0)
        stack.extend(panel.get("panels", []))
        found.append(panel)
    return found


def _by_title(dashboard: dict[str, Any], title: str) -> dict[str, Any]:
    (panel,) = [p for p in _panels(dashboard) if p["title"] == title]
    return panel


@pytest.fixture(scope="module")
def datasource_uid(datasources: list[dict[str, Any]]) -> str:
    (source,) = datasources
    uid: str = source["uid"]
    return uid


class TestDashboard:
    def test_identity(self, dashboard: dict[str, Any]) -> None:
        assert dashboard["uid"] == "rollout-sidecar"
        assert dashboard["title"] == "Rollout sidecar"
        assert dashboard["id"] is None, "provisioned dashboards must not carry a database id"

    def test_every_query_uses_the_provisioned_datasource(
        self, dashboard: dict[str, Any], datasource_uid: str
    ) -> None:
        for panel in _panels(dashboard):
            if panel["type"] == "row":
                continue
            assert panel["datasource"]["uid"] == datasource_uid, panel["title"]
            assert panel["targets"], f"panel {panel['title']!r} has no query"
        for title, target in dashboard_targets(dashboard):
            assert target["datasource"] == {"type": "prometheus", "uid": datasource_uid}, title
            assert target["expr"].strip(), title
        variable = dashboard["templating"]["list"][0]
        assert variable["datasource"]["uid"] == datasource_uid

    def test_run_selector(self, dashboard: dict[str, Any]) -> None:
        (variable,) = [v for v in dashboard["templating"]["list"] if v["name"] == "run_id"]
        assert variable["type"] == "query"
        assert variable["multi"] is True and variable["includeAll"] is True
        assert variable["query"]["query"].startswith("label_values(")
        assert variable["query"]["query"].rstrip(")").endswith("run_id")

    def test_panel_ids_are_unique(self, dashboard: dict[str, Any]) -> None:
        ids = [p["id"] for p in _panels(dashboard)]
        assert len(ids) == len(set(ids))

    def test_panels_fit_the_grid_without_overlap(self, dashboard: dict[str, Any]) -> None:
        cells: dict[tuple[int, int], str] = {}
        for panel in _panels(dashboard):
            pos = panel["gridPos"]
            assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
            for x in range(pos["x"], pos["x"] + pos["w"]):
                for y in range(pos["y"], pos["y"] + pos["h"]):
                    assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                    cells[(x, y)] = panel["title"]

    def test_throughput_sits_next_to_latency(self, dashboard: dict[str, Any]) -> None:
        throughput = _by_title(dashboard, "Throughput (rollouts/hour)")["gridPos"]
        latency = _by_title(dashboard, "Task latency p50 / p75 / p95")["gridPos"]
        assert throughput["y"] == latency["y"] and throughput["h"] == latency["h"]
        assert throughput["x"] + throughput["w"] == latency["x"]

    def test_latency_panel_shows_the_three_quantiles_and_the_timeout(self, dashboard: dict[str, Any]) -> None:
        panel = _by_title(dashboard, "Task latency p50 / p75 / p95")
        names = set().union(*(metric_names(t["expr"]) for t in panel["targets"]))
        assert "run_id:rollout_sidecar_task_duration_seconds:quantile_rate15m" in names
        assert "rollout_sidecar_task_duration_quantile_seconds" in names
        assert "rollout_sidecar_task_timeout_seconds" in names
        assert panel["fieldConfig"]["defaults"]["unit"] == "s"

    def test_drain_margin_is_plotted_against_time_left(self, dashboard: dict[str, Any]) -> None:
        panel = _by_title(dashboard, "Drain margin vs time left in the budget")
        names = set().union(*(metric_names(t["expr"]) for t in panel["targets"]))
        assert names == {
            "run_id:rollout_sidecar_drain_margin_seconds:max",
            "run_id:rollout_sidecar_budget_remaining_seconds",
        }
        assert panel["fieldConfig"]["defaults"]["unit"] == "s"

    def test_every_series_has_a_legend(self, dashboard: dict[str, Any]) -> None:
        for title, target in dashboard_targets(dashboard):
            assert target.get("legendFormat"), f"panel {title!r} query {target['refId']} has no legend"
