"""Prometheus config and rules: promtool accepts them, and every rule is unit-tested and documented."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ._promql import metric_names
from .conftest import (
    DASHBOARD_FILE,
    OPERATIONS_DOC,
    PROMETHEUS_DIR,
    RULE_FILES,
    RULE_TEST_FILES,
    dashboard_targets,
    load_yaml,
    rules_of,
)

_CONFIG = PROMETHEUS_DIR / "prometheus.yml"


def _promtool(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def _rule_tests() -> list[tuple[Path, dict[str, Any]]]:
    return [(path, test) for path in RULE_TEST_FILES for test in load_yaml(path)["tests"]]


class TestPromtool:
    def test_check_config(self, promtool: str) -> None:
        result = _promtool(promtool, "check", "config", _CONFIG)
        assert result.returncode == 0, result.stdout + result.stderr

    def test_check_rules(self, promtool: str) -> None:
        result = _promtool(promtool, "check", "rules", *RULE_FILES)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "FAILED" not in result.stdout + result.stderr

    def test_rule_unit_tests(self, promtool: str) -> None:
        result = _promtool(promtool, "test", "rules", *RULE_TEST_FILES)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.count("SUCCESS") == len(RULE_TEST_FILES), result.stdout

    def test_rule_unit_tests_can_fail(self, promtool: str, tmp_path: Path) -> None:
        """A wrong expectation makes promtool fail, so the green run above means something."""
        rules = tmp_path / "rules.yml"
        rules.write_text((PROMETHEUS_DIR / "rules" / "recording.yml").read_text(encoding="utf-8"))
        wrong = {
            "rule_files": [str(rules)],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [
                        {
                            "series": 'rollout_sidecar_budget_deadline_timestamp_seconds{run_id="r1"}',
                            "values": "3600x20",
                        }
                    ],
                    "promql_expr_test": [
                        {
                            "expr": "run_id:rollout_sidecar_budget_remaining_seconds",
                            "eval_time": "10m",
                            "exp_samples": [
                                {
                                    "labels": 'run_id:rollout_sidecar_budget_remaining_seconds{run_id="r1"}',
                                    "value": 3600,
                                }
                            ],
                        }
                    ],
                }
            ],
        }
        test_file = tmp_path / "wrong_test.yml"
        test_file.write_text(yaml.safe_dump(wrong), encoding="utf-8")
        result = _promtool(promtool, "test", "rules", test_file)
        assert result.returncode != 0
        assert "got:" in result.stdout + result.stderr
        assert "3E+03" in result.stdout + result.stderr  # what the rule really gives: 3600 - 600 s

    def test_dashboard_expressions_parse(
        self, promtool: str, tmp_path: Path, dashboard: dict[str, Any]
    ) -> None:
        """Every panel query is valid PromQL once Grafana's variables are substituted."""
        rules = []
        for index, (title, target) in enumerate(dashboard_targets(dashboard)):
            expr = target["expr"].replace("$run_id", ".+").replace("$__rate_interval", "1m")
            assert "$" not in expr, f"panel {title!r}: unsubstituted variable in {expr!r}"
            rules.append({"record": f"dashboard:panel_{index}", "expr": expr})
        path = tmp_path / "dashboard_rules.yml"
        path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}), encoding="utf-8")
        result = _promtool(promtool, "check", "rules", path)
        assert result.returncode == 0, f"{DASHBOARD_FILE}: {result.stdout}{result.stderr}"


class TestRuleFiles:
    def test_config_loads_every_rule_file(self) -> None:
        config = load_yaml(_CONFIG)
        loaded = {p for pattern in config["rule_files"] for p in _CONFIG.parent.glob(pattern)}
        assert loaded == set(RULE_FILES)

    def test_every_alert_has_a_firing_and_a_quiet_unit_test(self) -> None:
        firing: set[str] = set()
        quiet: set[str] = set()
        for _, test in _rule_tests():
            for case in test.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
        alerts = {rule["alert"] for rule in rules_of("alert")}
        assert alerts, "no alerting rules found"
        assert alerts - firing == set(), "alerts without a firing unit test"
        assert alerts - quiet == set(), "alerts without a non-firing unit test"
        assert (firing | quiet) - alerts == set(), "unit tests for alerts that do not exist"

    def test_every_recording_rule_has_a_unit_test(self) -> None:
        tested = {case["expr"] for _, test in _rule_tests() for case in test.get("promql_expr_test", [])}
        recorded = {rule["record"] for rule in rules_of("record")}
        assert recorded - tested == set()

    @pytest.mark.parametrize("rule", rules_of("alert"), ids=lambda rule: rule["alert"])
    def test_alert_reads_no_recorded_series(self, rule: dict[str, Any]) -> None:
        """Rule groups run independently: an alert on a recorded series lags by one evaluation."""
        assert {name for name in metric_names(rule["expr"]) if ":" in name} == set()

    @pytest.mark.parametrize("rule", rules_of("alert"), ids=lambda rule: rule["alert"])
    def test_alert_is_labelled_and_documented(self, rule: dict[str, Any]) -> None:
        name = rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning"}
        annotations = rule["annotations"]
        assert annotations["summary"] and annotations["description"]
        assert annotations["runbook"] == f"docs/operations.md#{name.lower()}"
        headings = re.findall(r"^#+\s+(\S+)\s*$", OPERATIONS_DOC.read_text(encoding="utf-8"), re.MULTILINE)
        assert name in headings, f"{OPERATIONS_DOC} has no section for {name}"
