"""Snapshot files of the runs' state: atomic, versioned, checksummed, newest valid one wins.

A snapshot holds the complete state of every run as of one journal seq, so a restart loads it
and replays only the records after that seq. Files live in ``<journal>.snapshots/`` as
``snapshot-<seq>.bin``::

    ROLLOUT-SIDECAR-SNAPSHOT\\n
    {"format": 5, "state_schema": "...", "seq": N, "body_bytes": L, "sha256": "..."}\\n
    <L bytes of body>

A file is written to a temporary name, fsynced, renamed into place and the directory fsynced,
so a crash leaves either the whole file or none. Reading checks the magic, the header, the
formats, the length and the checksum; a file failing any check (torn, corrupt, written by a
newer build) raises :class:`SnapshotDamaged`, and the caller moves it aside to ``<name>.bad``
with a log line naming the file and the reason (:meth:`SnapshotStore.discard`). A read that
fails with ``OSError`` or ``MemoryError`` proves nothing about the file: it propagates, and the
file stays where it is. The body is a pickle restricted to this
project's classes (see :func:`loads_state`); the snapshot directory is as trusted as the
journal beside it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from health.process_tuning import collector_paused, take_over
from sidecar.journal._facts import READABLE_STATE_SCHEMAS, STATE_SCHEMA
from sidecar.journal._lifeline import die_with_parent

__all__ = [
    "SNAPSHOT_FORMAT",
    "Snapshot",
    "SnapshotDamaged",
    "SnapshotStore",
    "dumps_state",
    "fork_writer",
    "loads_state",
]

_log = structlog.get_logger("sidecar.snapshot")

#: Version of the file layout and of the pickled state's layout (it changes whenever a state
#: class's attributes do: 4 is the packed reducer with closed groups on disk, verdict counts keyed
#: by name, and the perf core and the journal under their sub-packages; 5 the closed-groups mark
#: as per-segment CRCs); a file of another version is skipped, never misread.
SNAPSHOT_FORMAT = 5
#: Formats this build reads: 4 differs from 5 only in the closed-groups mark (one CRC).
READABLE_FORMATS = frozenset({4, 5})
_MAGIC = b"ROLLOUT-SIDECAR-SNAPSHOT\n"
_MAX_HEADER = 4096
_MAX_FD = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 65536
_NAME = re.compile(r"snapshot-(\d{20})\.bin")
_ALLOWED_PREFIXES = ("sidecar.", "health.", "sortedcontainers.")
_ALLOWED_GLOBALS = frozenset(
    {
        ("array", "_array_reconstructor"),
        ("array", "array"),
        ("builtins", "frozenset"),
        ("builtins", "set"),
        ("collections", "deque"),
    }
)


class _StateUnpickler(pickle.Unpickler):
    """Loads only this project's state classes and a few containers, never arbitrary callables."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS or module.startswith(_ALLOWED_PREFIXES):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"snapshot refers to {module}.{name}, which a state never holds")


def dumps_state(state: object) -> bytes:
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def loads_state(body: bytes) -> Any:
    """The state in ``body``; the cyclic collector is paused meanwhile (the state's millions of
    small tuples hold no cycles, but each collection would re-scan all of them: twice the time)."""
    with collector_paused():
        return _StateUnpickler(io.BytesIO(body)).load()


def fork_writer(store: SnapshotStore, seq: int, state: object) -> int | None:
    """Write ``state``'s snapshot from a forked child; returns its pid (``None``: no ``fork``).

    Serializing a million-rollout state takes seconds; in a child the event loop only waits for
    the fork (the page tables), and the child's copy-on-write view stays consistent while the
    parent goes on changing its own. The child touches nothing shared with the parent's other
    threads (no logging, no imports), closes every inherited descriptor (the listening socket and
    the journal lock must not outlive the parent), dies with the parent, and reports through its
    exit code (0: written). Memory: serializing touches every object's reference count, so the child ends
    up copying the state's pages: the state's memory is needed twice while a snapshot is written.
    """
    if not hasattr(os, "fork"):
        return None
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        take_over("snapshot-writer")  # this child only serializes: no collector passes
        die_with_parent(parent)
        # Inherited descriptors would keep the parent's listening socket and journal lock alive
        # should the parent die first: a restarted service could not bind or open the journal.
        os.closerange(3, _MAX_FD)
        store.write(seq, dumps_state(state))
        code = 0
    finally:
        os._exit(code)


@dataclass(frozen=True, slots=True)
class Snapshot:
    seq: int
    path: Path
    body: bytes


class SnapshotStore:
    """The snapshot files of one journal; ``keep`` is how many are kept after each write."""

    def __init__(self, directory: Path, *, keep: int = 2) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep!r}")
        self.directory = directory
        self.keep = keep
        #: Files the last :meth:`load_newest` skipped (moved aside to ``.bad``).
        self.skipped: list[Path] = []

    @classmethod
    def beside(cls, journal_path: Path, *, keep: int = 2) -> SnapshotStore:
        return cls(journal_path.with_name(journal_path.name + ".snapshots"), keep=keep)

    def seqs(self) -> list[int]:
        """Seqs of the snapshot files present (valid or not), oldest first."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        found = [int(match.group(1)) for name in names if (match := _NAME.fullmatch(name))]
        return sorted(found)

    def path_of(self, seq: int) -> Path:
        return self.directory / f"snapshot-{seq:020d}.bin"

    def write(self, seq: int, body: bytes) -> Path:
        """Durably write the snapshot of ``seq``, then delete all but the newest ``keep`` files.

        Blocking (fsyncs): call it from a worker thread. Raises ``OSError`` (the previous
        snapshots are untouched then).
        """
        self.directory.mkdir(parents=True, exist_ok=True)
        header = orjson.dumps(
            {
                "format": SNAPSHOT_FORMAT,
                "state_schema": STATE_SCHEMA,
                "seq": seq,
                "body_bytes": len(body),
                "sha256": hashlib.sha256(body).hexdigest(),
            }
        )
        final = self.path_of(seq)
        temporary = final.with_name(f".{final.name}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            with os.fdopen(fd, "wb", closefd=True) as handle:
                handle.write(_MAGIC + header + b"\n")
                handle.write(body)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, final)
        except BaseException:
            with contextlib.suppress(OSError):
                temporary.unlink()
            raise
        self._sync_directory()
        self.prune()
        return final

    def prune(self) -> None:
        """Delete all but the newest ``keep`` snapshots, and leftover temporary files."""
        for seq in self.seqs()[: -self.keep]:
            with contextlib.suppress(OSError):
                self.path_of(seq).unlink()
        with contextlib.suppress(OSError):
            for name in os.listdir(self.directory):
                if name.startswith(".snapshot-") and name.endswith(".tmp"):
                    with contextlib.suppress(OSError):
                        (self.directory / name).unlink()

    def oldest_kept(self) -> int | None:
        seqs = self.seqs()
        return seqs[0] if seqs else None

    def load(self, seq: int) -> Snapshot:
        """The snapshot of ``seq``, checked; raises :class:`SnapshotDamaged` (proven damage) or
        ``OSError`` / ``MemoryError`` (a failed read, which proves nothing about the file)."""
        path = self.path_of(seq)
        return Snapshot(seq, path, self._read(path, seq))

    def load_newest(self) -> Snapshot | None:
        """The newest snapshot that passes every check, or None.

        Each damaged one is logged and moved aside to ``<name>.bad``, so it no longer counts
        among the ``keep`` snapshots: the journal is then never compacted past the oldest
        snapshot that can actually be loaded. A read error propagates (nothing is moved).
        """
        for seq in reversed(self.seqs()):
            try:
                return self.load(seq)
            except SnapshotDamaged as exc:
                self.discard(self.path_of(seq), str(exc))
        return None

    def discard(self, path: Path, reason: str) -> None:
        """Set a snapshot aside (``<name>.bad``) with a log line: it is never loaded again."""
        _log.warning("snapshot skipped", path=str(path), reason=reason, kept_as=path.name + ".bad")
        self.skipped.append(path)
        with contextlib.suppress(OSError):
            os.replace(path, path.with_name(path.name + ".bad"))

    def _read(self, path: Path, seq: int) -> bytes:
        # The body is read on its own: slicing it out of the whole file would copy it. A failing
        # read raises OSError, which is not damage (the caller keeps the file).
        with path.open("rb") as file:
            data = file.read(len(_MAGIC) + _MAX_HEADER)
            end = data.find(b"\n", len(_MAGIC), len(_MAGIC) + _MAX_HEADER)
            file.seek(end + 1)
            body = file.read() if end >= 0 else b""
        if not data.startswith(_MAGIC):
            raise SnapshotDamaged("not a snapshot file (bad magic)")
        if end < 0:
            raise SnapshotDamaged("torn or corrupt header")
        try:
            header = orjson.loads(data[len(_MAGIC) : end])
        except orjson.JSONDecodeError as exc:
            raise SnapshotDamaged(f"corrupt header ({exc})") from exc
        if not isinstance(header, dict):
            raise SnapshotDamaged("corrupt header (not an object)")
        if header.get("format") not in READABLE_FORMATS:
            raise SnapshotDamaged(
                f"snapshot format {header.get('format')!r}, this build reads {sorted(READABLE_FORMATS)}"
            )
        if header.get("state_schema") not in READABLE_STATE_SCHEMAS:
            raise SnapshotDamaged(
                f"state schema {header.get('state_schema')!r}, this build reads "
                f"{sorted(READABLE_STATE_SCHEMAS)}"
            )
        if header.get("seq") != seq:
            raise SnapshotDamaged(f"header seq {header.get('seq')!r} does not match the file name")
        if len(body) != header.get("body_bytes"):
            raise SnapshotDamaged(
                f"torn: body has {len(body)} bytes, header says {header.get('body_bytes')!r}"
            )
        if hashlib.sha256(body).hexdigest() != header.get("sha256"):
            raise SnapshotDamaged("checksum mismatch (corrupt body)")
        return body

    def _sync_directory(self) -> None:
        with contextlib.suppress(OSError):
            fd = os.open(self.directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


class SnapshotDamaged(Exception):
    """Proven damage: why a snapshot file can never be used (its bytes fail a check)."""
