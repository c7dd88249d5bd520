"""Export of the sidecar's numbers into MLflow and Weights & Biases (extras ``mlflow``, ``wandb``).

Importing this package imports neither library: :mod:`sidecar.trackers.mlflow` and
:mod:`sidecar.trackers.wandb` do, and only they are imported when a tracker is configured.
Keys and artifact names are in :mod:`sidecar.trackers.keys`; docs/operations.md describes the
set-up.
"""

from sidecar.trackers._core import FinalPackage, OpenedRun, TrackerError, TrackerSession, report_files
from sidecar.trackers._settings import (
    DEFAULT_INTERVAL_S,
    TRACKERS,
    RunTarget,
    TrackerName,
    TrackerSettings,
    tracker_available,
)
from sidecar.trackers._state import ExportState, ExportStore

__all__ = [
    "DEFAULT_INTERVAL_S",
    "TRACKERS",
    "ExportState",
    "ExportStore",
    "FinalPackage",
    "OpenedRun",
    "RunTarget",
    "TrackerError",
    "TrackerName",
    "TrackerSession",
    "TrackerSettings",
    "report_files",
    "tracker_available",
]
