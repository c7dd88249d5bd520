"""``health-check RUN_DIR --mlflow-run-id/--wandb-run-path``: the batch report into a tracker run.

The artifacts are the files ``health-check`` just wrote (byte for byte), the summary metrics
and parameters the same keys the service logs at a run's end (those a batch check knows:
verdicts, records, ignored checks, versions).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from sidecar.export.trackers._core import TrackerSession, final_package
from sidecar.export.trackers._settings import RunTarget, TrackerName, TrackerSettings
from sidecar.export.trackers._state import ExportStore

__all__ = ["log_run_dir"]

_FILES = ("quality_summary.json", "rollout_verdicts.jsonl")


def log_run_dir(run_dir: Path, targets: dict[TrackerName, str], *, html: Path | None = None) -> list[str]:
    """Log ``run_dir``'s report into each target run; one message per tracker that failed.
    ``html``: the run's page written by ``--html``, logged as ``report.html``."""
    from sidecar.export.trackers.export import make_backend

    directory = run_dir.parent if run_dir.is_file() else run_dir
    files = {name: (directory / name).read_bytes() for name in _FILES}
    if html is not None and html.is_file():
        files["report.html"] = html.read_bytes()
    report = {"run_id": directory.name, "quality_summary": orjson.loads(files["quality_summary.json"])}
    failed: list[str] = []
    for name, ref in targets.items():
        try:
            backend = make_backend(name, TrackerSettings())
            session = TrackerSession(backend, ExportStore(None))
            try:
                session.log_final(
                    RunTarget(directory.name, given=ref), final_package({}, report, files, name)
                )
            finally:
                session.close()
        except Exception as exc:  # each tracker on its own: one failing leaves the other logged
            failed.append(f"logging into {name} run {ref!r} failed: {type(exc).__name__}: {exc}"[:500])
    return failed
