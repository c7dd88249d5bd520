"""The session's bookkeeping over a real side table: same run, next step, one final summary.

The backend here is a recording one (the real MLflow and W&B are in test_mlflow / test_wandb);
what is under test is what the session asks of it across a restart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from sidecar.export.trackers import RunTarget, TrackerName
from sidecar.export.trackers.keys import STEP_KEY
from sidecar.export.trackers.session import ExportStore, FinalPackage, OpenedRun, TrackerSession

PACKAGE = FinalPackage(params={}, metrics={"rollout_sidecar/final/samples": 3.0}, artifacts={})


@dataclass
class Recording:
    """A tracker that remembers what it was asked; ``remote_step`` is what it reports back."""

    name: TrackerName = "mlflow"
    created: list[str] = field(default_factory=list)
    steps: list[int] = field(default_factory=list)
    finals: list[tuple[str, int, bool]] = field(default_factory=list)
    remote_step: int | None = None
    remote_final: bool = False

    def open(self, target: RunTarget, known: str | None, instance: str) -> OpenedRun:
        if target.given is not None:
            return OpenedRun(target.given, self.remote_step, self.remote_final, created=False)
        if known is None:
            self.created.append(target.run_id)
            return OpenedRun(f"{instance}:{target.run_id}", created=True)
        return OpenedRun(known, self.remote_step, self.remote_final, created=True)

    def log_metrics(self, ref: str, metrics: dict[str, float], step: int) -> None:
        assert metrics[STEP_KEY] == step
        self.steps.append(step)

    def log_final(self, ref: str, package: FinalPackage, step: int, *, finish: bool) -> None:
        self.finals.append((ref, step, finish))

    def close(self) -> None:
        return None


class TestTrackerSession:
    def test_a_restart_continues_the_same_run_at_the_next_step(self, tmp_path: Path) -> None:
        backend = Recording()
        store = ExportStore(tmp_path / "side.sqlite3")
        session = TrackerSession(backend, store)
        for _ in range(3):
            session.log_live(RunTarget("r"), {})
        store.close()

        store = ExportStore(tmp_path / "side.sqlite3")  # the process died; a new one opens the table
        session = TrackerSession(backend, store)
        session.log_live(RunTarget("r"), {})
        session.log_final(RunTarget("r"), PACKAGE)
        session.log_final(RunTarget("r"), PACKAGE)
        assert backend.created == ["r"]
        assert backend.steps == [0, 1, 2, 3]
        assert backend.finals == [(f"{store.instance}:r", 4, True)]

    def test_a_step_the_tracker_has_but_the_table_missed_is_not_repeated(self, tmp_path: Path) -> None:
        backend = Recording()
        store = ExportStore(tmp_path / "side.sqlite3")
        TrackerSession(backend, store).log_live(RunTarget("r"), {})
        backend.remote_step = 5  # logged, then killed before the table recorded it
        session = TrackerSession(backend, ExportStore(tmp_path / "side.sqlite3"))
        session.log_live(RunTarget("r"), {})
        assert backend.steps == [0, 6]

    def test_a_final_summary_the_tracker_already_has_is_not_logged_again(self, tmp_path: Path) -> None:
        backend = Recording(remote_final=True)
        session = TrackerSession(backend, ExportStore(tmp_path / "side.sqlite3"))
        session.log_final(RunTarget("r", given="trainer"), PACKAGE)
        assert backend.finals == []
        session.log_live(RunTarget("r", given="trainer"), {})  # the run is over for the sidecar
        assert backend.steps == []

    def test_a_given_run_is_logged_into_and_not_finished(self, tmp_path: Path) -> None:
        backend = Recording()
        session = TrackerSession(backend, ExportStore(tmp_path / "side.sqlite3"))
        session.log_final(RunTarget("r", given="trainer"), PACKAGE)
        assert backend.created == []
        assert backend.finals == [("trainer", 0, False)]

    def test_the_journal_instance_id_is_kept(self, tmp_path: Path) -> None:
        first = ExportStore(tmp_path / "side.sqlite3").instance
        assert ExportStore(tmp_path / "side.sqlite3").instance == first
        assert ExportStore(tmp_path / "other.sqlite3").instance != first
