"""Rules and dashboard read only series the sidecar exposes (deploy/metric_names.txt) or rules record."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ._promql import SIDECAR_PREFIX, counter_function_args, metric_names, selectors
from .conftest import dashboard_targets, rules_of

_HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
_COUNTER_LIKE = ("_total", *_HISTOGRAM_SUFFIXES)
# Series Prometheus itself writes: scrape health and the alert state.
_PROMETHEUS_SERIES = {"up", "ALERTS"}
# Families without a run_id label (the sidecar's own health); everything else is run-scoped.
_SERVICE_FAMILIES = re.compile(r"^rollout_sidecar_(ingest_|journal_|otlp_|runs_active|build_info)")


def _family(name: str) -> str:
    for suffix in _HISTOGRAM_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _rule_exprs() -> list[tuple[str, str]]:
    return [
        (rule.get("record") or rule["alert"], rule["expr"]) for rule in rules_of("record") + rules_of("alert")
    ]


def _dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [(title, target["expr"]) for title, target in dashboard_targets(dashboard)]


def _recorded() -> set[str]:
    return {rule["record"] for rule in rules_of("record")}


class TestScanner:
    """The name checks below are only as good as the scanner, so pin its behaviour."""

    def test_names_skip_functions_groupings_ranges_strings_and_variables(self) -> None:
        expr = (
            'histogram_quantile(0.95, sum by (le, run_id) (rate(a_bucket{run_id=~"$run_id", x="b{c}"}'
            "[$__rate_interval]))) / on (run_id) group_left max without (le) (b:c:d offset 5m) "
            "or vector(1e3) unless count(e) by (f)"
        )
        assert metric_names(expr) == {"a_bucket", "b:c:d", "e"}

    def test_selectors_keep_their_matchers(self) -> None:
        assert selectors('sum(x{a="1"}) and y') == [("x", '{a="1"}'), ("y", "")]

    def test_counter_function_args(self) -> None:
        assert counter_function_args("increase(a_total[5m]) + rate(b_bucket{x='y'}[1m])") == [
            ("increase", "a_total"),
            ("rate", "b_bucket"),
        ]


class TestNamesFile:
    def test_well_formed(self, contract_names: list[str]) -> None:
        assert contract_names, "deploy/metric_names.txt is empty"
        assert len(set(contract_names)) == len(contract_names), "duplicate names"
        for name in contract_names:
            assert re.fullmatch(rf"{SIDECAR_PREFIX}[a-z0-9_]+", name), f"bad line {name!r}"

    def test_histograms_are_expanded(self, contract_names: list[str]) -> None:
        names = set(contract_names)
        for name in names:
            if name.endswith("_bucket"):
                base = _family(name)
                assert {f"{base}_sum", f"{base}_count"} <= names, base

    def test_counters_end_in_total(self, contract_names: list[str]) -> None:
        for name in contract_names:
            assert not name.endswith("_created"), name
            if "_total" in name:
                assert name.endswith("_total"), name


class TestRulesAndDashboardNames:
    @pytest.mark.parametrize(("where", "expr"), _rule_exprs(), ids=[name for name, _ in _rule_exprs()])
    def test_rule_reads_known_series(self, where: str, expr: str, contract_names: list[str]) -> None:
        allowed = set(contract_names) | _recorded() | {"up"}
        names = metric_names(expr)
        assert names, f"{where}: no series in {expr!r}"
        assert names - allowed == set(), where

    def test_dashboard_reads_known_series(self, dashboard: dict[str, Any], contract_names: list[str]) -> None:
        allowed = set(contract_names) | _recorded() | _PROMETHEUS_SERIES
        unknown = {
            (title, name)
            for title, expr in _dashboard_exprs(dashboard)
            for name in metric_names(expr)
            if name not in allowed
        }
        assert unknown == set()

    def test_dashboard_covers_every_family(
        self, dashboard: dict[str, Any], contract_names: list[str]
    ) -> None:
        """No metric of the contract goes unseen: every family has a panel."""
        used = {
            _family(name)
            for _, expr in _dashboard_exprs(dashboard)
            for name in metric_names(expr)
            if name.startswith(SIDECAR_PREFIX)
        }
        recorded_sources = {
            _family(name)
            for rule in rules_of("record")
            if rule["record"] in {n for _, e in _dashboard_exprs(dashboard) for n in metric_names(e)}
            for name in metric_names(rule["expr"])
        }
        families = {_family(name) for name in contract_names}
        assert families - (used | recorded_sources) == set()

    def test_run_scoped_panels_follow_the_run_variable(self, dashboard: dict[str, Any]) -> None:
        unfiltered = []
        for title, expr in _dashboard_exprs(dashboard):
            for name, matchers in selectors(expr):
                run_scoped = name.startswith("run_id:") or (
                    name.startswith(SIDECAR_PREFIX) and not _SERVICE_FAMILIES.match(name)
                )
                if run_scoped and 'run_id=~"$run_id"' not in matchers:
                    unfiltered.append((title, name))
        assert unfiltered == []

    def test_counter_functions_take_counters(self, dashboard: dict[str, Any]) -> None:
        wrong = [
            (where, function, name)
            for where, expr in _rule_exprs() + _dashboard_exprs(dashboard)
            for function, name in counter_function_args(expr)
            if not name.endswith(_COUNTER_LIKE)
        ]
        assert wrong == []

    def test_delta_takes_gauges(self, dashboard: dict[str, Any]) -> None:
        wrong = [
            (where, expr)
            for where, expr in _rule_exprs() + _dashboard_exprs(dashboard)
            for match in re.finditer(r"\b(?:delta|deriv)\s*\(\s*([A-Za-z_:][\w:]*)", expr)
            if match.group(1).endswith(_COUNTER_LIKE)
        ]
        assert wrong == []

    def test_recorded_names_follow_level_metric_operations(self) -> None:
        for name in _recorded():
            level, metric, *_ = name.split(":")
            assert level in {"run_id", "instance"} and metric.startswith(SIDECAR_PREFIX), name
