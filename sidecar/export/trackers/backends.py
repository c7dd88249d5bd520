"""The MLflow and W&B backends: the only module importing either library, each call bounded.

MLflow's client reads whole answers and retries (a 1.9 GB answer grew the process by as much), so
its requests go through a bounded adapter; W&B's HTTP runs in its own process with bounded waits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sidecar.export.failopen import MAX_RESPONSE_BYTES, Deadline
from sidecar.export.trackers import DEFAULT_EXPERIMENT, RunTarget, TrackerName, TrackerSettings
from sidecar.export.trackers.keys import PREFIX, STEP_KEY, UNHEALTHY_COLUMNS, UNHEALTHY_TABLE
from sidecar.export.trackers.session import Backend, FinalPackage, OpenedRun, TrackerError

RUN_ID_TAG = "rollout_sidecar.run_id"
INSTANCE_TAG = "rollout_sidecar.instance"
FINAL_TAG = "rollout_sidecar.final"
ARTIFACT_TYPE = "rollout_sidecar_report"
_ARTIFACT_DIR = PREFIX.rstrip("/")
#: Per thread: the total seconds of each HTTP call (set during a backend call), and its deadline.
_CALL = threading.local()


def _watch(sock: socket.socket) -> None:
    deadline: Deadline | None = getattr(_CALL, "deadline", None)
    if deadline is not None:
        deadline.watch(sock)


@contextlib.contextmanager
def _bounded(timeout_s: float) -> Iterator[None]:
    _CALL.timeout_s = timeout_s
    try:
        yield
    finally:
        _CALL.timeout_s = None


def _watching(base: Any) -> Any:
    """urllib3 connection class ``base`` whose sockets the current call's deadline watches."""

    class Watching(base):  # type: ignore[misc]
        def _new_conn(self) -> socket.socket:
            sock: socket.socket = super()._new_conn()
            _watch(sock)
            return sock

        def request(self, *args: Any, **kwargs: Any) -> None:
            if self.sock is not None:  # a kept-alive connection: watched by this call too
                _watch(self.sock)
            super().request(*args, **kwargs)

    return Watching


def _bounded_adapter() -> Any:
    """A ``requests`` adapter: MLflow's own on other threads; inside :func:`_bounded`, no retry,
    a total deadline and a capped read (a proxy's sockets keep per-read timeouts only)."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.connection import HTTPConnection, HTTPSConnection
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
    from urllib3.exceptions import TimeoutError as Urllib3Timeout

    pools = {
        "http": type("Pool", (HTTPConnectionPool,), {"ConnectionCls": _watching(HTTPConnection)}),
        "https": type("TlsPool", (HTTPSConnectionPool,), {"ConnectionCls": _watching(HTTPSConnection)}),
    }
    adapter: Any = HTTPAdapter

    class Bounded(adapter):  # type: ignore[misc]
        def __init__(self, inner: Any) -> None:
            super().__init__(max_retries=0)
            self.inner = inner

        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = pools

        def send(self, request: Any, stream: bool = False, timeout: Any = None, **kwargs: Any) -> Any:
            timeout_s = getattr(_CALL, "timeout_s", None)
            if timeout_s is None:  # not a tracker's call: MLflow's own adapter
                return self.inner.send(request, stream=stream, timeout=timeout, **kwargs)
            deadline = _CALL.deadline = Deadline(timeout_s)
            try:
                response = super().send(request, stream=True, timeout=deadline.left(), **kwargs)
                body = response.raw.read(MAX_RESPONSE_BYTES + 1, decode_content=True)
                deadline.left()  # raises once the deadline shut the socket
            except Exception as exc:
                if deadline.expired or isinstance(exc, requests.Timeout | TimeoutError | Urllib3Timeout):
                    raise requests.Timeout(f"no complete answer within {timeout_s:g} s") from None
                raise
            finally:
                deadline.cancel()
                _CALL.deadline = None
            if len(body) > MAX_RESPONSE_BYTES:
                response.close()
                raise requests.RequestException(f"answer over {MAX_RESPONSE_BYTES} bytes: not read")
            response._content = body
            response.raw.release_conn()
            return response

    return Bounded


def _bounded_sessions() -> None:
    """Wrap the adapters of every ``requests`` session MLflow's client builds (once per process)."""
    from mlflow.utils import request_utils

    original = request_utils._cached_get_request_session
    if getattr(original, "bounded", False):
        return
    bounded = _bounded_adapter()

    def sessions(*args: Any, **kwargs: Any) -> Any:
        session = original(*args, **kwargs)
        for prefix in ("http://", "https://"):
            if not isinstance(session.adapters.get(prefix), bounded):
                session.mount(prefix, bounded(session.adapters.get(prefix)))
        return session

    sessions.bounded = True  # type: ignore[attr-defined]
    setattr(request_utils, "_cached_get_request_session", sessions)  # noqa: B010


class MlflowBackend:
    """Logs into runs of one tracking server and experiment."""

    name: TrackerName = "mlflow"

    def __init__(
        self, tracking_uri: str | None, experiment: str | None, run_name: str | None, timeout_s: float
    ) -> None:
        from mlflow.tracking import MlflowClient

        _bounded_sessions()
        self.experiment = experiment or DEFAULT_EXPERIMENT
        self.run_name = run_name
        self.timeout_s = timeout_s
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
        final = run.data.tags.get(FINAL_TAG) == "done"
        return OpenedRun(ref, int(step) if step is not None else None, final, created)

    def open(self, target: RunTarget, known: str | None, instance: str) -> OpenedRun:
        """The client's run, else the run this journal created before, else a new one."""
        with _bounded(self.timeout_s):
            if target.given is not None or known is not None:
                return self._existing(target.given or str(known), created=target.given is None)
            experiment = self._experiment()
            query = f"tags.`{RUN_ID_TAG}` = '{target.run_id}' and tags.`{INSTANCE_TAG}` = '{instance}'"
            found = self._client.search_runs([experiment], filter_string=query, max_results=1)
            if found:
                return self._existing(found[0].info.run_id, created=True)
            tags = {RUN_ID_TAG: target.run_id, INSTANCE_TAG: instance}
            name = self.run_name or target.run_id
            return OpenedRun(
                self._client.create_run(experiment, tags=tags, run_name=name).info.run_id, created=True
            )

    def log_metrics(self, ref: str, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        with _bounded(self.timeout_s):
            self._client.log_batch(
                ref, metrics=[Metric(key, value, stamp, step) for key, value in metrics.items()]
            )

    def log_final(self, ref: str, package: FinalPackage, step: int, *, finish: bool) -> None:
        from mlflow.entities import Param

        with _bounded(self.timeout_s):
            self._client.log_batch(ref, params=[Param(key, value) for key, value in package.params.items()])
            self.log_metrics(ref, package.metrics, step)
            with tempfile.TemporaryDirectory(prefix="rollout-sidecar-") as tmp:
                for name, data in package.artifacts.items():
                    (Path(tmp) / name).write_bytes(data)
                    self._client.log_artifact(ref, str(Path(tmp) / name), artifact_path=_ARTIFACT_DIR)
            self._client.set_tag(ref, FINAL_TAG, "done")
            if finish:
                self._client.set_terminated(ref, "FINISHED")

    def close(self) -> None:
        """Nothing to release: the client holds no connection between calls."""


def wandb_run_id(instance: str, run_id: str) -> str:
    """The W&B id of the run this journal creates for ``run_id`` (stable across restarts)."""
    return "rs-" + hashlib.sha256(f"{instance}\0{run_id}".encode()).hexdigest()[:20]


def split_run_path(path: str) -> tuple[str | None, str | None, str]:
    """``entity/project/id``, ``project/id`` or ``id`` (checked by WANDB_RUN_PATH_PATTERN) -> a triple."""
    parts = path.strip("/").split("/")
    if parts[-2:-1] == ["runs"]:  # the web UI's entity/project/runs/id
        del parts[-2]
    padded: list[str | None] = [None] * (3 - len(parts)) + list(parts)
    return padded[0], padded[1], str(padded[2])


class WandbBackend:
    """Logs into W&B runs of one project (or the project each given run path names)."""

    name: TrackerName = "wandb"

    def __init__(
        self, project: str | None, entity: str | None, run_name: str | None, timeout_s: float
    ) -> None:
        # wandb's analytics are sent from this process with whole answers read: off.
        os.environ["WANDB_ERROR_REPORTING"] = "false"
        import wandb

        self._wandb: Any = wandb
        self.project, self.entity, self.run_name = project, entity, run_name
        self._settings = wandb.Settings(
            console="off", silent=True, x_disable_stats=True, x_disable_meta=True,
            init_timeout=timeout_s, finish_timeout=timeout_s,
            x_graphql_timeout_seconds=timeout_s, x_graphql_retry_max=3,
            x_file_stream_timeout_seconds=timeout_s, x_file_stream_retry_max=3,
            x_file_transfer_timeout_seconds=timeout_s, x_file_transfer_retry_max=3,
        )  # fmt: skip
        self._runs: dict[str, Any] = {}

    def open(self, target: RunTarget, known: str | None, instance: str) -> OpenedRun:
        entity, project, created = self.entity, self.project, target.given is None
        if target.given is not None:
            given_entity, given_project, run_id = split_run_path(target.given)
            entity, project = given_entity or entity, given_project or project
        else:
            run_id = known or wandb_run_id(instance, target.run_id)
        run = self._wandb.init(
            project=project,
            entity=entity,
            id=run_id,
            name=(self.run_name or target.run_id) if created else None,
            resume="allow",
            reinit="create_new",
            settings=self._settings,
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
        wandb, run = self._wandb, self._run(ref)
        run.config.update(package.params, allow_val_change=True)
        row: dict[str, Any] = {**package.metrics, STEP_KEY: step}
        if package.unhealthy:
            row[UNHEALTHY_TABLE] = wandb.Table(columns=list(UNHEALTHY_COLUMNS), data=package.unhealthy)
        run.log(row)
        run.summary.update(package.metrics)
        artifact = wandb.Artifact(f"{_ARTIFACT_DIR}-{ref}", type=ARTIFACT_TYPE)
        with tempfile.TemporaryDirectory(prefix="rollout-sidecar-") as tmp:
            for name, data in package.artifacts.items():
                (Path(tmp) / name).write_bytes(data)
                artifact.add_file(str(Path(tmp) / name), name=name)
            run.log_artifact(artifact)
            if finish:
                run.finish()
                self._runs.pop(ref, None)

    def close(self) -> None:
        for run in list(self._runs.values()):
            run.finish()
        self._runs.clear()


def make_backend(name: TrackerName, settings: TrackerSettings) -> Backend:
    """The backend of ``name`` (imports its library: call only with the extra installed)."""
    if name == "mlflow":
        return MlflowBackend(
            settings.mlflow_tracking_uri, settings.mlflow_experiment_name, settings.mlflow_run_name,
            settings.timeout_s,
        )  # fmt: skip
    return WandbBackend(
        settings.wandb_project, settings.wandb_entity, settings.wandb_name, settings.timeout_s
    )
