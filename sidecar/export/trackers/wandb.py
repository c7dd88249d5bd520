"""The Weights & Biases backend (the only module importing wandb).

wandb reads ``WANDB_API_KEY``, ``WANDB_MODE`` (``offline``: nothing leaves the machine),
``WANDB_DIR``, ``WANDB_BASE_URL``, ``WANDB_ENTITY`` and the rest of its environment itself.
Each sidecar run is one W&B run, opened with ``reinit="create_new"`` so several runs (and a
trainer's own run in the same process) coexist. A run the sidecar creates gets an id derived
from the journal's id and the run id, opened with ``resume="allow"``: a restarted sidecar
continues the same W&B run rather than starting a second one.

W&B has one step counter per run, which a trainer's run already drives; so the sidecar never
passes ``step=``: its keys are plotted against ``rollout_sidecar/step`` (``define_metric``), logged
in every row, and W&B's own ``_step`` stays the run owner's.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from sidecar.export.trackers._core import FinalPackage, OpenedRun, TrackerError
from sidecar.export.trackers._settings import RunTarget, TrackerName
from sidecar.export.trackers.keys import PREFIX, STEP_KEY, UNHEALTHY_COLUMNS, UNHEALTHY_TABLE

__all__ = ["ARTIFACT_TYPE", "WandbBackend", "split_run_path", "wandb_run_id"]

ARTIFACT_TYPE = "rollout_sidecar_report"


def wandb_run_id(instance: str, run_id: str) -> str:
    """The W&B id of the run this journal creates for ``run_id`` (stable across restarts)."""
    return "rs-" + hashlib.sha256(f"{instance}\0{run_id}".encode()).hexdigest()[:20]


def split_run_path(path: str) -> tuple[str | None, str | None, str]:
    """``entity/project/id``, ``project/id`` or ``id`` -> ``(entity, project, id)``."""
    parts = path.strip("/").split("/")
    if parts[-2:-1] == ["runs"]:  # the web UI's entity/project/runs/id
        del parts[-2]
    if not 1 <= len(parts) <= 3 or not all(parts):
        raise TrackerError(f"wandb run path must be [entity/][project/]run_id, got {path!r}")
    padded: list[str | None] = [None] * (3 - len(parts)) + list(parts)
    return padded[0], padded[1], str(padded[2])


class WandbBackend:
    """Logs into W&B runs of one project (or the project each given run path names)."""

    name: TrackerName = "wandb"

    def __init__(self, project: str | None, entity: str | None, run_name: str | None) -> None:
        import wandb

        self._wandb: Any = wandb
        self.project = project
        self.entity = entity
        self.run_name = run_name
        self._runs: dict[str, Any] = {}

    def open(self, target: RunTarget, known: str | None, instance: str) -> OpenedRun:
        entity, project = self.entity, self.project
        if target.given is not None:
            given_entity, given_project, run_id = split_run_path(target.given)
            entity, project = given_entity or entity, given_project or project
            created = False
        else:
            run_id = known or wandb_run_id(instance, target.run_id)
            created = True
        wandb = self._wandb
        run = wandb.init(
            project=project,
            entity=entity,
            id=run_id,
            name=None if not created else (target.name or self.run_name or target.run_id),
            resume="allow",
            reinit="create_new",
            settings=wandb.Settings(console="off", silent=True, x_disable_stats=True, x_disable_meta=True),
        )
        run.define_metric(STEP_KEY)
        run.define_metric(PREFIX + "*", step_metric=STEP_KEY)
        self._runs[run_id] = run
        return OpenedRun(run_id, last_step=None, created=created)

    def _run(self, ref: str) -> Any:
        run = self._runs.get(ref)
        if run is None:
            raise TrackerError(f"wandb run {ref!r} is not open in this process")
        return run

    def log_metrics(self, ref: str, metrics: dict[str, float], step: int) -> None:
        self._run(ref).log({**metrics, STEP_KEY: step})

    def log_final(self, ref: str, package: FinalPackage, step: int, *, finish: bool) -> None:
        wandb = self._wandb
        run = self._run(ref)
        run.config.update(package.params, allow_val_change=True)
        row: dict[str, Any] = {**package.metrics, STEP_KEY: step}
        if package.unhealthy:
            row[UNHEALTHY_TABLE] = wandb.Table(columns=list(UNHEALTHY_COLUMNS), data=package.unhealthy)
        run.log(row)
        run.summary.update(package.metrics)
        artifact = wandb.Artifact(f"{PREFIX.rstrip('/')}-{ref}", type=ARTIFACT_TYPE)
        with tempfile.TemporaryDirectory(prefix="rollout-sidecar-") as tmp:
            for name, data in package.artifacts.items():
                path = Path(tmp) / name
                path.write_bytes(data)
                artifact.add_file(str(path), name=name)
            run.log_artifact(artifact)
            if finish:
                run.finish()
                self._runs.pop(ref, None)

    def close(self) -> None:
        for run in list(self._runs.values()):
            run.finish()
        self._runs.clear()
