"""Export of the sidecar's numbers into MLflow and Weights & Biases (extras ``mlflow``, ``wandb``).

Importing this package (or any module here but :mod:`~sidecar.export.trackers.backends`, and that
one only when a backend is built) imports neither library. ``_settings``: what ``serve`` was told;
``cli``: the flags and ``health-check``'s logging; ``keys``: the names logged; ``session``: the
exactly-once bookkeeping; ``backends``: MLflow and W&B, each call bounded; ``export``: the
service's interval loop. docs/operations.md describes the set-up.
"""

from __future__ import annotations

from sidecar.export.trackers._settings import (
    TRACKERS,
    RunTarget,
    TrackerName,
    TrackerSettings,
    tracker_available,
)

__all__ = ["TRACKERS", "RunTarget", "TrackerName", "TrackerSettings", "tracker_available"]
