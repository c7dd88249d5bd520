"""The backend interface and the exactly-once bookkeeping, kept in ``<journal>.trackers.sqlite3``
(``synchronous=FULL``) so a SIGKILL neither repeats nor loses a tracker run, step or summary.
"""

from __future__ import annotations

import sqlite3
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sidecar.export.trackers import RunTarget, TrackerName
from sidecar.export.trackers.keys import STEP_KEY, final_metrics, run_params, unhealthy_rows


class TrackerError(RuntimeError):
    """A tracker refused or could not be reached; the message names the tracker and the run."""


@dataclass(frozen=True, slots=True)
class OpenedRun:
    """A tracker run ready to log into; ``created``: the sidecar made it (and so ends it)."""

    ref: str
    last_step: int | None = None
    final_logged: bool = False
    created: bool = False


@dataclass(frozen=True, slots=True)
class FinalPackage:
    """Everything logged once at the end of a run."""

    params: dict[str, str]
    metrics: dict[str, float]
    #: Artifact file name -> its bytes (the report files, byte for byte).
    artifacts: dict[str, bytes]
    unhealthy: list[list[Any]] = field(default_factory=list)


class Backend(Protocol):
    """One tracker library behind the session; every call runs on the tracker's thread."""

    name: TrackerName

    def open(self, target: RunTarget, known: str | None, instance: str) -> OpenedRun: ...
    def log_metrics(self, ref: str, metrics: dict[str, float], step: int) -> None: ...
    def log_final(self, ref: str, package: FinalPackage, step: int, *, finish: bool) -> None: ...
    def close(self) -> None: ...


def final_package(
    config: dict[str, Any], report: dict[str, Any], files: dict[str, bytes], tracker: TrackerName
) -> FinalPackage:
    """The final package of a run from its ``run_started`` fields, report and report files."""
    return FinalPackage(
        params=run_params(config, report, tracker),
        metrics=final_metrics(report),
        artifacts=files,
        unhealthy=unhealthy_rows(files.get("rollout_verdicts.jsonl", b"")),
    )


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tracker_runs (
    run_id TEXT NOT NULL, tracker TEXT NOT NULL, ref TEXT, step INTEGER NOT NULL DEFAULT -1,
    final INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (run_id, tracker));
CREATE TABLE IF NOT EXISTS tracker_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@dataclass(slots=True)
class ExportState:
    """One run in one tracker: its tracker run id, the last step logged, whether it ended there."""

    ref: str | None = None
    step: int = -1
    final: bool = False


class ExportStore:
    """The side table; safe from any thread (one connection behind a lock)."""

    def __init__(self, path: Path | None) -> None:
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(":memory:" if path is None else str(path), check_same_thread=False,
                                     isolation_level=None)  # fmt: skip
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(_SCHEMA)
        self.instance = self._instance()

    def _instance(self) -> str:
        """This journal's id, tagged on every tracker run it creates (a run id alone may recur)."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM tracker_meta WHERE name='instance'").fetchone()
            if row is not None:
                return str(row[0])
            value = uuid.uuid4().hex
            self._conn.execute("INSERT INTO tracker_meta VALUES ('instance', ?)", (value,))
            return value

    def get(self, run_id: str, tracker: str) -> ExportState:
        with self._lock:
            row = self._conn.execute(
                "SELECT ref, step, final FROM tracker_runs WHERE run_id=? AND tracker=?", (run_id, tracker)
            ).fetchone()
        return ExportState() if row is None else ExportState(row[0], int(row[1]), bool(row[2]))

    def finished(self, tracker: str) -> set[str]:
        """Runs whose final summary ``tracker`` already holds."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT run_id FROM tracker_runs WHERE tracker=? AND final=1", (tracker,)
            )
            return {str(row[0]) for row in rows}

    def put(self, run_id: str, tracker: str, state: ExportState) -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO tracker_runs (run_id, tracker, ref, step, final) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (run_id, tracker) DO UPDATE SET ref=excluded.ref, step=excluded.step, "
                "final=excluded.final",
                (run_id, tracker, state.ref, state.step, int(state.final)),
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class TrackerSession:
    """One tracker's bookkeeping over all runs (used from that tracker's thread only)."""

    def __init__(self, backend: Backend, store: ExportStore) -> None:
        self.backend = backend
        self.store = store
        self._open: dict[str, OpenedRun] = {}

    def _opened(self, target: RunTarget) -> tuple[OpenedRun, ExportState]:
        state = self.store.get(target.run_id, self.backend.name)
        opened = self._open.get(target.run_id)
        if opened is None:
            opened = self.backend.open(target, state.ref, self.store.instance)
            if state.ref != opened.ref:
                state.ref = opened.ref
                self.store.put(target.run_id, self.backend.name, state)  # before anything is logged
            self._open[target.run_id] = opened
        return opened, state

    def _next_step(self, opened: OpenedRun, state: ExportState) -> int:
        remote = opened.last_step if opened.last_step is not None else -1
        return max(state.step, remote) + 1

    def log_live(self, target: RunTarget, metrics: dict[str, float]) -> None:
        """One live step (skipped once the run's final summary is logged)."""
        opened, state = self._opened(target)
        if state.final:
            return
        step = self._next_step(opened, state)
        self.backend.log_metrics(opened.ref, {**metrics, STEP_KEY: float(step)}, step)
        state.step = step
        self.store.put(target.run_id, self.backend.name, state)
        self._open[target.run_id] = OpenedRun(opened.ref, step, opened.final_logged, opened.created)

    def log_final(self, target: RunTarget, package: FinalPackage) -> None:
        """The final summary, once: not again after a restart that finds it logged."""
        opened, state = self._opened(target)
        if state.final:
            return
        step = self._next_step(opened, state)
        if not opened.final_logged:
            self.backend.log_final(opened.ref, package, step, finish=opened.created)
        state.step, state.final = step, True
        self.store.put(target.run_id, self.backend.name, state)
        self._open.pop(target.run_id, None)

    def close(self) -> None:
        self.backend.close()
