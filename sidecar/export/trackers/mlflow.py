"""The MLflow backend: ``MlflowClient`` over the tracking server (the only module importing mlflow).

The client reads ``MLFLOW_TRACKING_URI`` (when ``--mlflow-tracking-uri`` is not given),
``MLFLOW_TRACKING_TOKEN`` / ``MLFLOW_TRACKING_USERNAME`` / ``..._PASSWORD`` and its other
variables itself. Unless set, the sidecar lowers the client's HTTP retries
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES=0``, ``MLFLOW_HTTP_REQUEST_TIMEOUT=10``): a live step that
cannot be sent now is dropped and counted, the next interval sends a fresh one.

A run the sidecar creates carries the tags ``rollout_sidecar.run_id`` and
``rollout_sidecar.instance`` (the journal's id), so a restart finds it again even if it was
killed between creating it and recording its id. The final summary ends with the tag
``rollout_sidecar.final=done``; a run that has it is not summarised twice.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from sidecar.export.trackers._core import FinalPackage, OpenedRun, TrackerError
from sidecar.export.trackers._settings import DEFAULT_EXPERIMENT, RunTarget, TrackerName
from sidecar.export.trackers.keys import PREFIX, STEP_KEY

__all__ = ["FINAL_TAG", "INSTANCE_TAG", "RUN_ID_TAG", "MlflowBackend"]

RUN_ID_TAG = "rollout_sidecar.run_id"
INSTANCE_TAG = "rollout_sidecar.instance"
FINAL_TAG = "rollout_sidecar.final"
_ARTIFACT_DIR = PREFIX.rstrip("/")
_CLIENT_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}


class MlflowBackend:
    """Logs into runs of one tracking server and experiment."""

    name: TrackerName = "mlflow"

    def __init__(self, tracking_uri: str | None, experiment: str | None, run_name: str | None) -> None:
        for key, value in _CLIENT_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow.tracking import MlflowClient

        self.tracking_uri = tracking_uri
        self.experiment = experiment or DEFAULT_EXPERIMENT
        self.run_name = run_name
        self._client: Any = MlflowClient(tracking_uri=tracking_uri)
        self._experiment_id: str | None = None

    def _experiment(self) -> str:
        if self._experiment_id is None:
            found = self._client.get_experiment_by_name(self.experiment)
            if found is None:
                try:
                    self._experiment_id = str(self._client.create_experiment(self.experiment))
                except Exception:  # created meanwhile by another process
                    found = self._client.get_experiment_by_name(self.experiment)
                    if found is None:
                        raise
            if found is not None:
                self._experiment_id = str(found.experiment_id)
        assert self._experiment_id is not None
        return self._experiment_id

    def _existing(self, ref: str, created: bool) -> OpenedRun:
        try:
            run = self._client.get_run(ref)
        except Exception as exc:
            raise TrackerError(f"mlflow run {ref!r} cannot be read: {type(exc).__name__}: {exc}") from exc
        step = run.data.metrics.get(STEP_KEY)
        return OpenedRun(
            ref,
            last_step=int(step) if step is not None else None,
            final_logged=run.data.tags.get(FINAL_TAG) == "done",
            created=created,
        )

    def open(self, target: RunTarget, known: str | None, instance: str) -> OpenedRun:
        """The client's run, else the run this journal created before, else a new one."""
        if target.given is not None:
            return self._existing(target.given, created=False)
        if known is not None:
            return self._existing(known, created=True)
        experiment = self._experiment()
        query = f"tags.`{RUN_ID_TAG}` = '{target.run_id}' and tags.`{INSTANCE_TAG}` = '{instance}'"
        found = self._client.search_runs([experiment], filter_string=query, max_results=1)
        if found:
            return self._existing(found[0].info.run_id, created=True)
        tags = {RUN_ID_TAG: target.run_id, INSTANCE_TAG: instance}
        run = self._client.create_run(
            experiment, tags=tags, run_name=target.name or self.run_name or target.run_id
        )
        return OpenedRun(run.info.run_id, created=True)

    def log_metrics(self, ref: str, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self._client.log_batch(
            ref, metrics=[Metric(key, value, stamp, step) for key, value in metrics.items()]
        )

    def log_final(self, ref: str, package: FinalPackage, step: int, *, finish: bool) -> None:
        from mlflow.entities import Param

        self._client.log_batch(ref, params=[Param(key, value) for key, value in package.params.items()])
        self.log_metrics(ref, package.metrics, step)
        with tempfile.TemporaryDirectory(prefix="rollout-sidecar-") as tmp:
            for name, data in package.artifacts.items():
                path = Path(tmp) / name
                path.write_bytes(data)
                self._client.log_artifact(ref, str(path), artifact_path=_ARTIFACT_DIR)
        self._client.set_tag(ref, FINAL_TAG, "done")
        if finish:
            self._client.set_terminated(ref, "FINISHED")

    def close(self) -> None:
        """Nothing to release: the client holds no connection between calls."""
