"""Fetch a run's post-run report from a live sidecar and write its files; the two health files
are the service's raw bytes, byte-identical to the batch ``health-check``'s."""

from __future__ import annotations

import shutil
from dataclasses import astuple, dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

__all__ = ["REPORT_FILES", "ReportError", "ReportFiles", "fetch_page", "fetch_report"]

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
        response.read()
        try:
            body = response.json()
            reason = f"{body.get('error')}: {body.get('detail')}"
        except ValueError:
            reason = response.text[:200]
        hint = " (GET /v1/runs lists the runs it knows)" if response.status_code == 404 else ""
        raise ReportError(f"{response.request.url} answered {response.status_code} ({reason}){hint}")


def fetch_page(
    sidecar: str, run_id: str, *, token: str | None = None, timeout: float = 60.0
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The run's page body and timeline (``None`` where it has none), for ``write_html``."""
    base = f"/v1/runs/{run_id}"
    try:
        with httpx.Client(base_url=sidecar, headers=_auth(token), timeout=timeout) as client:
            page = client.get(f"{base}/page")
            _check(page)
            timeline = client.get(f"{base}/timeline")
            if timeline.status_code != 404:
                _check(timeline)
    except httpx.HTTPError as exc:
        raise ReportError(f"cannot reach {sidecar}: {exc}") from exc
    return page.json(), (timeline.json() if timeline.status_code == 200 else None)


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _make_dir(out_dir: Path) -> Path | None:
    """Create ``out_dir`` (and missing parents); the topmost directory this created, if any."""
    missing = [parent for parent in (out_dir, *out_dir.parents) if not parent.exists()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReportError(f"cannot create output directory {str(out_dir)!r}: {exc.strerror or exc}") from exc
    return missing[-1] if missing else None


def fetch_report(
    sidecar: str, run_id: str, out_dir: Path, *, token: str | None = None, timeout: float = 300.0
) -> ReportFiles:
    """Write the three report files of ``run_id`` into ``out_dir``, all or nothing (temporary
    names renamed at the end; removed again on failure)."""
    headers = _auth(token)
    params = {"run_id": run_id}
    if out_dir.exists() and not out_dir.is_dir():  # refused before asking the sidecar anything
        raise ReportError(
            f"output directory {str(out_dir)!r} is a file; pass a directory (created if missing)"
        )
    files = ReportFiles(*(out_dir / name for name in REPORT_FILES))
    parts = ReportFiles(*(out_dir / f".{name}.part" for name in REPORT_FILES))
    created: Path | None = None
    made = False
    try:
        with httpx.Client(base_url=sidecar, headers=headers, timeout=timeout) as client:
            report = client.get("/report", params=params)
            _check(report)  # an unknown run is refused before anything is written
            summary = client.get("/report/quality_summary.json", params=params)
            _check(summary)
            created = _make_dir(out_dir)
            made = True
            with client.stream("GET", "/report/verdicts", params=params) as stream:
                _check(stream)
                with parts.verdicts.open("wb") as handle:
                    for chunk in stream.iter_bytes():
                        handle.write(chunk)
        body = orjson.loads(report.content)
        body.pop("quality_summary", None)
        parts.summary.write_bytes(summary.content)
        parts.report.write_bytes(orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n")
        for part, final in zip(astuple(parts), astuple(files), strict=True):
            part.replace(final)
    except BaseException as exc:
        for part in astuple(parts) if made else ():
            part.unlink(missing_ok=True)
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        if isinstance(exc, httpx.HTTPError):
            raise ReportError(f"cannot fetch the report from {sidecar}: {exc}") from exc
        if isinstance(exc, OSError):
            raise ReportError(f"cannot write the report into {str(out_dir)!r}: {exc}") from exc
        raise
    return files
