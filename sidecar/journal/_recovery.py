"""Choosing the state a start rebuilds from: the newest snapshot that is whole, or none.

A snapshot is usable when its file passes every check, its state unpickles and attaches, and
the closed groups it refers to are whole in ``closed-groups.bin`` or its copy. Proven damage (a
failed checksum, format or CRC; a state that does not load) sets the file aside as
``<name>.bad``; a read that fails (``OSError``, ``MemoryError``) proves nothing, so the file
stays where it is. Either way the next older snapshot is tried, and without
one the whole journal is replayed (``Ingestor.replay`` refuses if records it needs were
compacted). :class:`Recovery` remembers what happened, for the log and a refusal's one line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from sidecar.journal._closed_groups import ClosedGroupFile, ClosedGroupsMark, ClosedGroupsTorn
from sidecar.journal._snapshot import SnapshotDamaged, SnapshotStore, loads_state

__all__ = ["Recovery", "load_usable_snapshot"]

_log = structlog.get_logger("sidecar.snapshot")
_REASON_CHARS = 300


@dataclass
class Recovery:
    """What a start did with the snapshots it could not use."""

    #: Set aside as ``<name>.bad`` (proven damage), with the reason.
    set_aside: list[tuple[Path, str]] = field(default_factory=list)
    #: Could not be read (kept in place), with the error.
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    #: ``(first, last)`` seqs the loaded snapshot covers but the journal lost (None: none lost).
    lost: tuple[int, int] | None = None
    #: The loaded snapshot is of an older format (4): the start rewrites it in this one.
    older_format: bool = False

    def describe(self) -> str:
        """One line: what was set aside where, and what was kept in place."""
        parts = [f"{path.name} set aside as {path.name}.bad ({reason})" for path, reason in self.set_aside]
        parts += [
            f"{path.name} could not be read ({error}), kept in place" for path, error in self.unreadable
        ]
        return "; ".join(parts)


def load_usable_snapshot(
    store: SnapshotStore,
    groups: ClosedGroupFile | None,
    *,
    journal_end: int | None,
    attach: Callable[[dict[str, Any]], Any],
    recovery: Recovery,
) -> tuple[int, Path, Any] | None:
    """``(seq, path, attach(state))`` of the newest usable snapshot, or None.

    ``journal_end`` is the journal's last seq (None: unknown): a snapshot past it covers records
    the journal lost (a damaged WAL); it is used, and :attr:`Recovery.lost` says which seqs the
    journal must skip. ``groups`` is restored to the chosen snapshot's mark.
    """
    for seq in reversed(store.seqs()):
        path = store.path_of(seq)
        try:
            snapshot = store.load(seq)
            state = loads_state(snapshot.body)
            del snapshot
            mark = _mark(state.get("closed_groups"))
            if groups is not None:
                groups.restore(mark)
            attached = attach(state)
        except (OSError, MemoryError) as exc:
            error = f"{type(exc).__name__}: {exc}"[:_REASON_CHARS]
            _log.warning("snapshot unreadable", path=str(path), error=error, kept=True)
            recovery.unreadable.append((path, error))
            continue
        except SnapshotDamaged as exc:
            _set_aside(store, recovery, path, str(exc))
            continue
        except ClosedGroupsTorn as exc:
            _set_aside(store, recovery, path, f"closed groups it refers to are damaged: {exc}")
            continue
        except Exception as exc:  # the checksum holds but the state does not load: another build's layout
            _set_aside(store, recovery, path, f"state does not load: {type(exc).__name__}: {exc}")
            continue
        recovery.older_format = mark is not None and not isinstance(mark, ClosedGroupsMark)
        if journal_end is not None and seq > journal_end:
            # The journal lost its newest records (a damaged WAL keeps only the commits before
            # the damage); the snapshot still holds their effect. It is used, and the journal's
            # seqs are moved past it (``Ingestor.seal_lost_records``) so no new record reuses one.
            recovery.lost = (journal_end + 1, seq)
            _log.warning("journal behind its snapshot", path=str(path), seq=seq, journal_end=journal_end)
        return seq, path, attached
    return None


def _mark(stored: Any) -> ClosedGroupsMark | tuple[int, int] | None:
    """The closed-groups mark a state stored: ``(length, (crc, ...))``, or format 4's ``(length, crc)``."""
    if stored is None:
        return None
    length, crcs = stored
    return (int(length), crcs) if isinstance(crcs, int) else ClosedGroupsMark(int(length), tuple(crcs))


def _set_aside(store: SnapshotStore, recovery: Recovery, path: Path, reason: str) -> None:
    reason = reason[:_REASON_CHARS].replace("\n", " ")
    store.discard(path, reason)
    recovery.set_aside.append((path, reason))
