"""Export into MLflow and W&B (extras ``mlflow``, ``wandb``): ``serve``'s settings and the run target.

Light on purpose: ``sidecar.http.settings`` and ``sidecar.ingest.events`` import it; only
``backends`` imports a tracker library. Names follow NeMo Gym's exporter settings.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_EXPERIMENT",
    "DEFAULT_INTERVAL_S",
    "MLFLOW_RUN_ID_PATTERN",
    "WANDB_RUN_PATH_PATTERN",
    "RunTarget",
    "TrackerName",
    "TrackerSettings",
    "tracker_available",
]

TrackerName = Literal["mlflow", "wandb"]
DEFAULT_INTERVAL_S = 15.0
#: ``tracking.mlflow_run_id`` / ``--mlflow-run-id``: an MLflow run id (32 hex digits today).
MLFLOW_RUN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
#: ``tracking.wandb_run_path`` / ``--wandb-run-path``: ``[entity/][project/]run_id``.
WANDB_RUN_PATH_PATTERN = r"^[A-Za-z0-9_.-]{1,128}(/[A-Za-z0-9_.-]{1,128}){0,2}$"
#: Default experiment of runs the sidecar creates in MLflow.
DEFAULT_EXPERIMENT = "rollout-sidecar"


def tracker_available(name: TrackerName) -> bool:
    """True when the extra of ``name`` is installed (looked up without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ModuleNotFoundError, ValueError):
        return False


@dataclass(frozen=True, slots=True)
class TrackerSettings:
    """``serve``'s tracker flags (bounds checked by its parser); a tracker is on when its URI/experiment
    or project is given."""

    mlflow_tracking_uri: str | None = None
    mlflow_experiment_name: str | None = None
    mlflow_run_name: str | None = None
    wandb_project: str | None = None
    wandb_entity: str | None = None
    wandb_name: str | None = None
    #: Seconds between two live steps.
    interval_s: float = DEFAULT_INTERVAL_S
    #: Jobs waiting for a tracker; past it a live step is dropped (counted ``queue_full``).
    queue_size: int = 64
    #: Longest the service's shutdown waits for a tracker to take the last jobs.
    stop_deadline_s: float = 2.0
    #: While a tracker is down it is tried again at most this often (or every interval, if longer).
    retry_down_s: float = 10.0
    #: Longest one MLflow HTTP call or one W&B wait takes before it fails (backends.py).
    timeout_s: float = 10.0

    @property
    def enabled(self) -> tuple[TrackerName, ...]:
        """The trackers switched on, in a fixed order."""
        on: list[TrackerName] = []
        if self.mlflow_tracking_uri or self.mlflow_experiment_name:
            on.append("mlflow")
        if self.wandb_project:
            on.append("wandb")
        return tuple(on)


@dataclass(frozen=True, slots=True)
class RunTarget:
    """One sidecar run in one tracker: ``given`` names an existing tracker run to log into;
    without it the sidecar creates one and finishes it when the run ends."""

    run_id: str
    given: str | None = None
