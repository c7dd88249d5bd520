"""The key names: one prefix, every key documented where operators look."""

from __future__ import annotations

import re
from pathlib import Path

from sidecar.export.trackers.keys import PREFIX, UNHEALTHY_TABLE, final_metrics, unhealthy_rows

DOC = Path(__file__).resolve().parents[4] / "docs" / "operations.md"


def documented_keys() -> set[str]:
    """The keys docs/operations.md lists ("| `a/b/c`, `d`, `e` |": c, d and e under a/b/)."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## MLflow and Weights & Biases") :]
    assert f"`{UNHEALTHY_TABLE}`" in section
    documented: set[str] = set()
    for row in (line for line in section.splitlines() if line.startswith("| `rollout_sidecar/")):
        first, *rest = re.findall(r"`([^`]+)`", row.split("|")[1])
        parent = first.rsplit("/", 1)[0] + "/"
        documented.add(first)
        documented.update(parent + name for name in rest)
    return documented


class TestKeys:
    def test_documented_keys_have_the_prefix_and_none_is_nemo_gyms(self) -> None:
        nemo_gym = ("progress/total/rollouts_per_min", "coverage/expected", "coverage/scored", "Rollouts")
        for key in documented_keys():
            assert key.startswith(PREFIX) and key not in nemo_gym, key

    def test_final_metrics_leave_out_what_the_report_lacks(self) -> None:
        report = {"latency": {"quantiles": {"0.5": None}, "completions_per_hour": 12.5}, "accounting": {}}
        assert final_metrics(report) == {PREFIX + "final/rollouts_per_hour": 12.5}

    def test_unhealthy_rows_keep_only_unhealthy_verdicts(self) -> None:
        verdicts = (
            b'{"_ng_task_index":0,"_ng_rollout_index":1,"rollout_id":"0-1","verdict":"unhealthy",'
            b'"findings":[{"check":"b"},{"check":"a"}],"unobserved":[]}\n'
            b'{"_ng_task_index":0,"_ng_rollout_index":2,"rollout_id":"0-2","verdict":"healthy",'
            b'"findings":[],"unobserved":["unhealthy"]}\n'
        )
        assert unhealthy_rows(verdicts) == [["0", "1", "0-1", "a,b", '[{"check":"b"},{"check":"a"}]']]
