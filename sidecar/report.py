"""Fetch a run's post-run report from a live sidecar and write it as files.

``quality_summary.json`` and ``rollout_verdicts.jsonl`` are written from the service's raw
bytes, so they are byte-identical to what the batch ``health-check`` writes over the same
rows; everything else (latency, perf summary, accounting, event counts) goes to
``report.json``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

__all__ = ["REPORT_FILES", "ReportError", "ReportFiles", "fetch_report"]

REPORT_FILES = ("quality_summary.json", "rollout_verdicts.jsonl", "report.json")


class ReportError(RuntimeError):
    """The sidecar refused or could not be reached; the message names the URL and the reason."""


@dataclass(frozen=True, slots=True)
class ReportFiles:
    summary: Path
    verdicts: Path
    report: Path


def _check(response: httpx.Response) -> None:
    if response.status_code >= 400:
        try:
            body = response.json()
            reason = f"{body.get('error')}: {body.get('detail')}"
        except ValueError:
            reason = response.text[:200]
        raise ReportError(f"{response.request.url} answered {response.status_code} ({reason})")


def fetch_report(
    sidecar: str, run_id: str, out_dir: Path, *, token: str | None = None, timeout: float = 300.0
) -> ReportFiles:
    """Write the three report files of ``run_id`` into ``out_dir`` (created if missing)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    params = {"run_id": run_id}
    out_dir.mkdir(parents=True, exist_ok=True)
    files = ReportFiles(*(out_dir / name for name in REPORT_FILES))
    try:
        with httpx.Client(base_url=sidecar, headers=headers, timeout=timeout) as client:
            summary = client.get("/report/quality_summary.json", params=params)
            _check(summary)
            files.summary.write_bytes(summary.content)
            with client.stream("GET", "/report/verdicts", params=params) as stream:
                _check(stream)
                with files.verdicts.open("wb") as handle:
                    for chunk in stream.iter_bytes():
                        handle.write(chunk)
            report = client.get("/report", params=params)
            _check(report)
    except httpx.HTTPError as exc:
        raise ReportError(f"cannot fetch the report from {sidecar}: {exc}") from exc
    body = orjson.loads(report.content)
    body.pop("quality_summary", None)
    files.report.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
    return files
