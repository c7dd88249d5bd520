"""Export of the sidecar's numbers into MLflow and Weights & Biases (extras ``mlflow``, ``wandb``).

Importing this package imports neither library: :mod:`sidecar.export.trackers.mlflow` and
:mod:`sidecar.export.trackers.wandb` do, and only they are imported when a tracker is configured.
Public names are imported on first access (PEP 562), so ``health-check``, which registers its
tracker flags through :mod:`sidecar.export.trackers.cli`, pays nothing for the export machinery (its
keys' ``importlib.metadata`` and the state store's ``sqlite3``) unless a tracker is given. Keys
and artifact names are in :mod:`sidecar.export.trackers.keys`; docs/operations.md describes the set-up.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from health.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from sidecar.export.trackers._core import (
        FinalPackage,
        OpenedRun,
        TrackerError,
        TrackerSession,
        report_files,
    )
    from sidecar.export.trackers._settings import (
        DEFAULT_INTERVAL_S,
        TRACKERS,
        RunTarget,
        TrackerName,
        TrackerSettings,
        tracker_available,
    )
    from sidecar.export.trackers._state import ExportState, ExportStore

#: Where each public name lives.
_SOURCES = {
    "FinalPackage": "_core",
    "OpenedRun": "_core",
    "TrackerError": "_core",
    "TrackerSession": "_core",
    "report_files": "_core",
    "DEFAULT_INTERVAL_S": "_settings",
    "TRACKERS": "_settings",
    "RunTarget": "_settings",
    "TrackerName": "_settings",
    "TrackerSettings": "_settings",
    "tracker_available": "_settings",
    "ExportState": "_state",
    "ExportStore": "_state",
}

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


__getattr__, __dir__ = lazy_exports(__name__, _SOURCES, __all__)
