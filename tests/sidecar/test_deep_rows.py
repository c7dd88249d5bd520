"""Rows nested deeper than pydantic can dump are reported as the batch check reports them."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import httpx

from health import health_check_run_dir
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings


def _dumps(value: Any) -> str:
    """orjson refuses to write more than 255 levels; the standard library does not."""
    return json.dumps(value, separators=(",", ":"))


def _nested(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


def _row(task: int, answer: Any) -> dict[str, Any]:
    turn = {
        "invocation_id": "main",
        "task_id": "t",
        "rollout_id": "r",
        "turn_no": 1,
        "timestamp": 1.0,
        "step_count": 1,
        "answer": answer,
    }
    return {
        "_ng_task_index": task,
        "_ng_rollout_index": 0,
        "ng_trajectory": {"task_id": "t", "rollout_id": "r", "turns": [turn]},
    }


_CAP = 1024
"""The service's default --max-json-depth, and orjson's own limit."""
_BODY_LEVELS_ABOVE_ANSWER = 6
"""The body's list, the event, the row, ``ng_trajectory``, ``turns`` and the turn."""


def _nested_text(levels: int) -> str:
    """``_nested(levels)`` as JSON text, written without recursion (deeper than this process's
    recursion limit lets the standard library write)."""
    return "[" * levels + '"x"' + "]" * levels


class TestDeepRows:
    def test_live_report_equals_batch_for_deep_free_form_values(self, tmp_path: Path) -> None:
        rows = [_row(0, "fine"), _row(1, _nested(300)), _row(2, _nested(600))]
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "rollouts.jsonl").write_bytes("".join(_dumps(row) + "\n" for row in rows).encode())
        with contextlib.redirect_stdout(io.StringIO()):
            batch = health_check_run_dir(run_dir, workers=1)
        verdicts = batch.verdicts_path.read_bytes()
        assert verdicts.count(b'"error":"ValueError"') == 2  # the dump's nesting limit, not a parse error

        events: list[dict[str, Any]] = [{"kind": "run_started", "plan": {"0": 1, "1": 1, "2": 1}}]
        events += [{"kind": "completed", "seconds": 1.0, "row": row} for row in rows]
        settings = ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3")
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            response = client.post("/v1/runs/deep/events", content=_dumps(events).encode())
            assert response.status_code == 200, response.text
            live = client.get("/report/verdicts", params={"run_id": "deep"}).content
            summary = client.get("/report/quality_summary.json", params={"run_id": "deep"}).content
        assert live == verdicts
        assert summary == batch.summary_path.read_bytes()
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:  # replay
            assert client.get("/report/verdicts", params={"run_id": "deep"}).content == verdicts

    def test_a_body_nested_to_the_cap_is_accepted_and_reported_as_the_batch_check_does(
        self, tmp_path: Path
    ) -> None:
        """Past the interpreter's default recursion limit of 1000, but within the 1024 cap: the
        raw path's decoder and the deep-row writer must not fail mid-request (they once gave a 500)."""
        levels = _CAP - _BODY_LEVELS_ABOVE_ANSWER
        marker = '"x"'
        line = _dumps(_row(0, "x")).replace(marker, _nested_text(levels))
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        (run_dir / "rollouts.jsonl").write_text(line + "\n")
        with contextlib.redirect_stdout(io.StringIO()):
            batch = health_check_run_dir(run_dir, workers=1)
        verdicts = batch.verdicts_path.read_bytes()
        assert verdicts.count(b'"error":"ValueError"') == 1

        started = _dumps({"kind": "run_started", "plan": {"0": 1}})
        body = f'[{started},{{"kind":"completed","seconds":1.0,"row":{line}}}]'
        too_deep = body.replace(marker, "[" + marker + "]")
        settings = ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3")
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            refused = client.post("/v1/runs/deep/events", content=too_deep.encode())
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"] == "too_deep"
            response = client.post("/v1/runs/deep/events", content=body.encode())
            assert response.status_code == 200, response.text
            assert [r["status"] for r in response.json()["results"]] == ["accepted", "accepted"]
            retry = client.post("/v1/runs/deep/events", content=body.encode())
            assert retry.json()["results"][1]["status"] == "duplicate"
            assert client.get("/report/verdicts", params={"run_id": "deep"}).content == verdicts
