"""The run directory the demo's dispatcher writes, as NeMo Gym's collector lays it out.

``rollouts.jsonl`` (successes, with ``ng_perf`` attached), ``rollouts_failures.jsonl`` (failure
rows) and ``rollouts_materialized_inputs.jsonl`` (the dispatched rows). A fresh run replaces
them. Main-file lines are written in the order their completions were submitted to the
sidecar (a small reorder buffer), so the batch health check over the file sees the records in
the order the service did and writes the same verdict file.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import orjson

__all__ = ["FAILURES_FILE", "INPUTS_FILE", "ROLLOUTS_FILE", "RunFiles"]

ROLLOUTS_FILE = "rollouts.jsonl"
FAILURES_FILE = "rollouts_failures.jsonl"
INPUTS_FILE = "rollouts_materialized_inputs.jsonl"


class RunFiles:
    """Append-only writers of one fresh run directory; use as a context manager."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.rollouts_path = run_dir / ROLLOUTS_FILE
        self.failures_path = run_dir / FAILURES_FILE
        self.inputs_path = run_dir / INPUTS_FILE
        self.rows_written = 0
        self.failures_written = 0
        self._main: IO[bytes] | None = None
        self._failures: IO[bytes] | None = None
        self._next = 0
        self._written = 0
        self._pending: dict[int, bytes | None] = {}

    def open(self) -> RunFiles:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for path in (self.rollouts_path, self.failures_path, self.inputs_path):
            path.unlink(missing_ok=True)
        self._main = self.rollouts_path.open("ab")
        self._failures = self.failures_path.open("ab")
        return self

    def close(self) -> None:
        """Close both files, then raise if a reserved main-file slot was never filled."""
        unfilled = self.unfilled_slots()
        self._close_files()
        if unfilled:
            raise RuntimeError(f"main-file slots {unfilled[:5]} were reserved but never filled")

    def unfilled_slots(self) -> list[int]:
        """Reserved slots still waiting for :meth:`fill` (lines after them are held back)."""
        return sorted(set(range(self._written, self._next)) - set(self._pending))

    def _close_files(self) -> None:
        main, failures = self._main, self._failures
        self._main = self._failures = None
        try:
            if main is not None:
                main.close()
        finally:
            if failures is not None:
                failures.close()

    def __enter__(self) -> RunFiles:
        return self.open()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:  # the first error is the one to report; unfilled slots follow from it
            self._close_files()
        else:
            self.close()

    def write_inputs(self, rows: Iterable[dict[str, Any]]) -> None:
        with self.inputs_path.open("wb") as handle:
            for row in rows:
                handle.write(orjson.dumps(row) + b"\n")

    def reserve(self) -> int:
        """A slot in the main file's order; fill it with :meth:`fill` (``None``: nothing to write)."""
        slot = self._next
        self._next += 1
        return slot

    def fill(self, slot: int, row: dict[str, Any] | None) -> None:
        """Write ``row`` at ``slot`` once every earlier slot is filled (flushed line by line)."""
        if self._main is None:
            raise RuntimeError("RunFiles is not open")
        self._pending[slot] = None if row is None else orjson.dumps(row) + b"\n"
        while self._written in self._pending:
            line = self._pending.pop(self._written)
            self._written += 1
            if line is not None:
                self._main.write(line)
                self.rows_written += 1
        self._main.flush()

    def write_failure(self, row: dict[str, Any]) -> None:
        if self._failures is None:
            raise RuntimeError("RunFiles is not open")
        self._failures.write(orjson.dumps(row) + b"\n")
        self._failures.flush()
        self.failures_written += 1
