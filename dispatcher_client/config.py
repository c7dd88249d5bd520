"""Limits and counters of the client: what it buffers, for how long it retries, what it lost.

Every limit has a documented consequence (see ``docs/client.md``): nothing blocks the
caller; past the in-memory limit events spill to the optional spool, past the spool limit
(or without a spool) the newest event is dropped and counted in :attr:`ClientStats.dropped`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["TOKEN_ENV_VAR", "ClientConfig", "ClientStats", "FsyncPolicy", "resolve_token"]

TOKEN_ENV_VAR = "ROLLOUT_SIDECAR_TOKEN"
"""The environment variable holding the bearer token, for the service and its clients alike."""


def resolve_token(token: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The bearer token a client sends: an explicit ``token`` wins (``""``: send none);
    ``None`` reads ``$ROLLOUT_SIDECAR_TOKEN`` (stripped; unset or blank: send none)."""
    if token is not None:
        return token or None
    value = (os.environ if env is None else env).get(TOKEN_ENV_VAR, "").strip()
    return value or None


FsyncPolicy = Literal["always", "interval", "never"]


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """Tuning of :class:`~dispatcher_client.SidecarClient`; the defaults suit one dispatcher."""

    max_batch_events: int = 64
    """Events per request at most (the service accepts 10,000; see docs/client.md, "Batch size")."""
    max_batch_bytes: int = 256 << 10
    """Request body bytes at most (one larger event goes alone): about 5 ms of the service's digest
    for realistic ~10 KB rows, so a batch never holds its loop for long."""
    linger_s: float = 0.002
    """How long a partial batch waits for company before it is sent."""
    max_buffered_events: int = 20_000
    """In-memory events not yet acknowledged; past it they spill to the spool (or drop)."""
    max_buffered_bytes: int = 128 << 20
    """In-memory bytes not yet acknowledged; past it they spill to the spool (or drop)."""
    spool_dir: Path | None = None
    """Directory of the on-disk spool; ``None`` keeps everything in memory."""
    spool_max_bytes: int = 4 << 30
    """Unsent bytes the spool may hold; past it new events are dropped."""
    fsync: FsyncPolicy = "interval"
    """``always``: fsync after every spill; ``interval``: at most every ``fsync_interval_s``
    (a host crash may lose that much spooled data; a process crash loses nothing written);
    ``never``: leave it to the OS."""
    fsync_interval_s: float = 1.0
    request_timeout_s: float = 10.0
    """Per-request timeout; a timed-out batch is retried (idempotency keys make that safe)."""
    connect_timeout_s: float = 1.0
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 5.0
    """Retry delay: ``min(max, initial * 2**n)`` scaled by a random factor in [0.5, 1]."""
    ack_timeout_s: float = 0.5
    """How long :meth:`SidecarClient.completed` waits for the service's ``ng_perf`` before it
    answers with the locally built one (it does not wait at all while the sidecar is down)."""
    handoff_interval_s: float = 0.01
    """Sync facade / RemoteLatencyTracker: how often the background thread collects the events
    the caller's thread handed over (earlier when a full batch is waiting)."""
    close_timeout_s: float = 5.0
    """How long closing tries to deliver what is buffered; the rest goes to the spool or is
    counted as dropped."""
    clock: Callable[[], float] = time.time
    """The wall clock (Unix seconds) each event is stamped with when it happens (``at``, the
    run's ``started_at`` and ``ended_at``): the sidecar's rates and timeline go by it."""

    def __post_init__(self) -> None:
        for name in ("max_batch_events", "max_batch_bytes", "max_buffered_events", "max_buffered_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"ClientConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("linger_s", "backoff_initial_s", "ack_timeout_s", "close_timeout_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"ClientConfig.{name} must be >= 0, got {getattr(self, name)!r}")
        for name in ("handoff_interval_s", "fsync_interval_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"ClientConfig.{name} must be > 0, got {getattr(self, name)!r}")
        if self.fsync not in ("always", "interval", "never"):
            raise ValueError(f"ClientConfig.fsync must be always|interval|never, got {self.fsync!r}")


@dataclass(slots=True)
class ClientStats:
    """Counters since the client started (events, not requests, unless named so)."""

    submitted: int = 0
    sent: int = 0
    """Events the sidecar acknowledged (accepted or duplicate)."""
    duplicates: int = 0
    """Acknowledged as already journaled (a retry of a delivered event: nothing double counted)."""
    retried: int = 0
    """Event deliveries repeated after a failed or timed-out request."""
    spooled: int = 0
    """Events written to the on-disk spool."""
    dropped: int = 0
    """Events lost: buffer and spool full, or still undelivered when the client closed."""
    rejected: int = 0
    """Events the sidecar refused (4xx other than an unknown run): a client bug, logged."""
    requests: int = 0
    failed_requests: int = 0
    local_ng_perf: int = 0
    """``completed`` answers built locally because the sidecar did not answer in time."""
    local_drain_margin: int = 0
    """``drain_margin`` answers from the client's local tracker (sidecar down or slow)."""
    buffered: int = 0
    """Events in memory right now (gauge)."""
    spool_pending_bytes: int = 0
    """Unsent bytes in the spool right now (gauge)."""
    connected: bool = True
    """False after a failed request, until the next success."""
    last_error: str | None = field(default=None)
