"""NeMo Gym's rollout collection, instrumented in place (loaded by the attach ``sitecustomize``).

Wrapped, never copied, only while ``run_from_config`` runs. A finished row is sent when the next one
arrives (token capture edits it after ``ng_perf``). Any error here stops the instrumentation, never the job.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from pathlib import Path
from types import ModuleType
from typing import Any

from dispatcher_client import ClientConfig, RemoteLatencyTracker, SyncSidecarClient
from dispatcher_client.attach import POOLED_ENV, TOKEN_FILE_ENV, URL_ENV, run_id_for
from dispatcher_client.attach import say as _say
from dispatcher_client.client import completed_event, drained_event, failed_event

__all__ = ["TESTED_VERSIONS", "install"]

TESTED_VERSIONS = "0.7."
_METHODS = ("run_from_config", "_run_examples_with_metadata")
_Key = tuple[Any, Any, Any]

_RUN: ContextVar[_Run | None] = ContextVar("rollout_sidecar_attach_run", default=None)
#: The rollout a task is running (set where it posts to ``/run``, read where it records its duration).
_ROLLOUT: ContextVar[_Key | None] = ContextVar("rollout_sidecar_attach_rollout", default=None)


def _key(row: Mapping[str, Any]) -> _Key:
    return row.get("_ng_task_index"), row.get("_ng_rollout_index"), row.get("_ng_attempt_index")


class _Tracker(RemoteLatencyTracker):
    """The job's tracker. Its calls are not forwarded: each rollout's own event carries its
    duration (kept here per rollout until then) or its drain."""

    def __init__(self, run: _Run) -> None:
        super().__init__(client=run.client, start_run=False, pooled=run.pooled)
        self.run = run

    def record(self, seconds: float) -> None:
        self.local.record(seconds)
        key = _ROLLOUT.get()
        if key is not None:
            self.run.seconds[key] = seconds

    def record_drained(self) -> None:
        self.local.record_drained()

    def summary(self) -> str:
        self.run.guard(self.run.send_pending)  # the collection loop is over: its last row is written
        return self.local.summary()


class _Run:
    """One attached ``run_from_config``: its client, tracker and the row not yet sent."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.url = os.environ[URL_ENV].rstrip("/")
        self.run_id = run_id_for(getattr(config, "output_jsonl_fpath", None))
        self.pooled = os.environ.get(POOLED_ENV) == "1"
        token_file = os.environ.get(TOKEN_FILE_ENV)
        token = Path(token_file).read_text().strip() if token_file else None
        # a tenth of a second of company per request: the job's CPU goes to the job, not to small POSTs
        config = ClientConfig(linger_s=0.1)
        self.client = SyncSidecarClient(self.url, run_id=self.run_id, token=token, config=config)
        self.tracker: _Tracker | None = None
        self.seconds: dict[_Key, float] = {}
        self.pending: tuple[dict[str, Any], float | None] | None = None
        self.announced = self.broken = False
        _say(f"run {self.run_id}: {self.url}/runs/{self.run_id}")

    def open_tracker(self) -> None:
        self.tracker = _Tracker(self)

    def guard(self, step: Any, *args: Any) -> None:
        """Run one step of the instrumentation; the first error stops it (said once), never the job."""
        if self.broken:
            return
        try:
            step(*args)
        except Exception as exc:
            self.broken = True
            _say(f"instrumentation stopped ({type(exc).__name__}: {exc}); the job goes on unobserved")

    def start(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """``run_started`` with the plan of the rows dispatched (none when pooled: the first
        process's plan would be the run's, and the others' rows would fall outside it)."""
        if self.announced:
            return
        self.announced = True
        config = self.config
        tasks = (row.get("_ng_task_index") for row in rows)
        plan = None if self.pooled else Counter(t for t in tasks if isinstance(t, int | str))
        self.client.start_run(
            plan=plan,
            dispatch_budget_s=getattr(config, "dispatch_budget_s", None),
            drain_margin_s=getattr(config, "drain_margin_s", None),
            source_path=str(getattr(config, "output_jsonl_fpath", "rollouts.jsonl")),
            ignored_checks=list(getattr(config, "health_check_ignored_checks", None) or ()),
        )

    def started(self, row: Any) -> None:
        if isinstance(row, Mapping):
            _ROLLOUT.set(_key(row))
            self.client.started(row)

    def finished(self, result: dict[str, Any], latency_ms: float | None) -> None:
        self.send_pending()
        self.pending = (result, latency_ms)

    def send_pending(self) -> None:
        if self.pending is None:
            return
        result, latency_ms = self.pending
        self.pending = None
        row = dict(result)  # the collector keeps the dict; top-level changes after this are not ours
        number = self.client.next_number()
        if row.get("_ng_dispatch_drained"):
            event = drained_event(row, None, number)
        elif latency_ms is None and row.get("_ng_failure_class") is not None:  # /run failed: no reply
            event = failed_event(row, row, None, number)
        else:
            seconds = self.seconds.pop(_key(row), None)
            if seconds is None:
                seconds = (latency_ms or 0.0) / 1000.0
            event = completed_event(row, row, seconds, latency_ms, number)
        self.client.submit_event(event)

    def end(self) -> None:
        """Send what is left and ``run_ended`` (not when pooled: the service ends a run at its first
        ``run_ended``, and the other processes may still run), then close, waiting for delivery
        at most 2 s (not at all while the sidecar is unreachable)."""
        client, tracker = self.client, self.tracker
        self.guard(self.send_pending)
        if not self.pooled and not self.broken:
            client.run_ended()
        client.flush(2.0 if client.stats.connected else 0.0)
        margin = "unused"
        if tracker is not None:
            if tracker.pooled is not None or self.pooled:
                tracker.refresh()
            pooled = tracker.pooled
            samples = f"pooled over {pooled[1]}" if pooled is not None else f"local, {tracker.local.count}"
            margin = f"{tracker.drain_margin(None)!r} s ({samples} samples)"
            tracker.close()
        client.close(0.0)
        stats = client.stats
        lost = stats.submitted - stats.sent - stats.rejected
        _say(
            f"run {self.run_id}: {stats.sent} events delivered to {self.url}, {stats.rejected} refused, "
            f"{lost} not delivered; drain margin {margin}"
        )


def install(module: ModuleType) -> None:
    """Wrap ``module`` (``nemo_gym.rollout_collection``, just executed) if the launcher asked for it."""
    if not os.environ.get(URL_ENV):
        return
    version = str(getattr(sys.modules.get("nemo_gym"), "__version__", "unknown"))
    helper = getattr(module, "RolloutCollectionHelper", None)
    names = ("DispatchLatencyTracker", "_attach_ng_perf", "ServerClient")
    missing = [name for name in names if not hasattr(module, name)]
    missing += [f"RolloutCollectionHelper.{name}" for name in _METHODS if not hasattr(helper, name)]
    if not hasattr(getattr(module, "ServerClient", None), "post"):
        missing.append("ServerClient.post")
    if not version.startswith(TESTED_VERSIONS) or missing:
        why = f"missing {', '.join(missing)}" if missing else f"tested with {TESTED_VERSIONS}x only"
        _say(f"NeMo Gym {version}: {why}; the job runs unpatched (`rollout-sidecar follow` reads its files)")
        return
    handler = logging.StreamHandler()  # the client's outage and drop warnings, on the job's stderr
    handler.setFormatter(logging.Formatter("rollout-sidecar attach: %(message)s"))
    handler.setLevel(logging.WARNING)
    logging.getLogger("dispatcher_client").addHandler(handler)
    # NeMo Gym logs httpx at INFO: not the requests of our client's thread (SyncSidecarClient's)
    logging.getLogger("httpx").addFilter(lambda record: record.threadName != "sidecar-client")
    _wrap_tracker(module)
    _wrap_calls(module, helper)


def _wrap_tracker(module: ModuleType) -> None:
    class DispatchLatencyTracker(module.DispatchLatencyTracker):  # type: ignore[name-defined,misc]
        """The attached run's first tracker is its :class:`_Tracker`; any other is NeMo Gym's own."""

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            run = _RUN.get()
            if run is not None and run.tracker is None and not run.broken:
                run.guard(run.open_tracker)
                if run.tracker is not None:
                    return run.tracker
            return super().__new__(cls)

    setattr(module, "DispatchLatencyTracker", DispatchLatencyTracker)  # noqa: B010


def _wrap_calls(module: ModuleType, helper: Any) -> None:
    run_from_config = helper.run_from_config
    dispatch = helper._run_examples_with_metadata
    post = module.ServerClient.post
    attach_ng_perf = module._attach_ng_perf

    @functools.wraps(run_from_config)
    async def run_from_config_attached(self: Any, config: Any, *args: Any, **kwargs: Any) -> Any:
        if _RUN.get() is not None:
            return await run_from_config(self, config, *args, **kwargs)
        try:
            run = _Run(config)
        except Exception as exc:
            _say(f"not attached ({type(exc).__name__}: {exc}); the job runs unobserved")
            return await run_from_config(self, config, *args, **kwargs)
        token = _RUN.set(run)
        try:
            return await run_from_config(self, config, *args, **kwargs)
        finally:
            _RUN.reset(token)
            try:
                run.end()
            except Exception as exc:
                _say(f"closing the client failed ({type(exc).__name__}: {exc})")

    @functools.wraps(dispatch)
    def dispatch_attached(self: Any, examples: Any, *args: Any, **kwargs: Any) -> Any:
        run = _RUN.get()
        if run is not None:
            run.guard(run.start, examples)
        return dispatch(self, examples, *args, **kwargs)

    @functools.wraps(post)
    async def post_attached(self: Any, *args: Any, **kwargs: Any) -> Any:
        run = _RUN.get()
        if run is not None and kwargs.get("url_path", args[1] if len(args) > 1 else None) == "/run":
            run.guard(run.started, kwargs.get("json"))
        return await post(self, *args, **kwargs)

    @functools.wraps(attach_ng_perf)
    def attach_ng_perf_attached(result: Any, *args: Any, **kwargs: Any) -> Any:
        answer = attach_ng_perf(result, *args, **kwargs)
        run = _RUN.get()
        if run is not None and isinstance(result, dict):
            run.guard(run.finished, result, kwargs.get("rollout_latency_ms"))
        return answer

    helper.run_from_config = run_from_config_attached
    helper._run_examples_with_metadata = dispatch_attached
    module.ServerClient.post = post_attached
    setattr(module, "_attach_ng_perf", attach_ng_perf_attached)  # noqa: B010
