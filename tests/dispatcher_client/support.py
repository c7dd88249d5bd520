"""Shared helpers: a real sidecar as a subprocess (the project's one helper for it, so it can be
stopped and restarted on the same port and journal), and the batch health check's files for
comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from health import health_check_run_dir
from tests.reliability_harness.sidecar_process import REPO_ROOT, SidecarProcess, free_port

__all__ = ["REPO_ROOT", "SidecarProcess", "batch_files", "free_port", "sidecar_files", "stable_report"]


def batch_files(run_dir: Path, rollouts_file: str | None = None) -> tuple[bytes, bytes]:
    """``quality_summary.json`` and ``rollout_verdicts.jsonl`` of the batch health check."""
    result = health_check_run_dir(run_dir, rollouts_file, workers=1)
    return result.summary_path.read_bytes(), result.verdicts_path.read_bytes()


def sidecar_files(url: str, run_id: str) -> tuple[bytes, bytes]:
    """The sidecar's byte-identical counterparts of :func:`batch_files`."""
    params = {"run_id": run_id}
    with httpx.Client(base_url=url, timeout=30) as client:
        summary = client.get("/report/quality_summary.json", params=params)
        verdicts = client.get("/report/verdicts", params=params)
    assert summary.status_code == 200, summary.text
    assert verdicts.status_code == 200, verdicts.text
    return summary.content, verdicts.content


def stable_report(body: dict[str, Any]) -> dict[str, Any]:
    """A report without what differs between two runs of the same events (ids, clocks)."""
    body = dict(body)
    for key in ("run_id", "started_at", "ended_at"):
        body.pop(key, None)
    body["latency"] = {k: v for k, v in body["latency"].items() if k != "completions_per_hour"}
    return body
