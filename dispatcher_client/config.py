"""Limits and counters of the client; each limit's consequence is in ``docs/client.md``, "Limits"."""

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
    """Tuning of :class:`~dispatcher_client.SidecarClient`; the defaults suit one dispatcher
    (docs/client.md, "Limits")."""

    max_batch_events: int = 64  # events per request (the service takes 10,000: docs/client.md, "Batch size")
    max_batch_bytes: int = 256 << 10  # body bytes per request (~5 ms of the service's digest; one larger
    # event goes alone)
    linger_s: float = 0.002  # how long a partial batch waits for company
    max_buffered_events: int = 20_000  # unacknowledged in memory; past it they spill to the spool (or drop)
    max_buffered_bytes: int = 128 << 20
    spool_dir: Path | None = None  # the on-disk spool; None keeps everything in memory
    spool_max_bytes: int = 4 << 30  # unsent bytes the spool may hold; past it new events are dropped
    fsync: FsyncPolicy = "interval"  # always: each spill; interval: every fsync_interval_s; never: the OS's
    fsync_interval_s: float = 1.0
    request_timeout_s: float = 10.0  # a timed-out batch is retried (idempotency keys make that safe)
    connect_timeout_s: float = 1.0
    backoff_initial_s: float = 0.05  # retry delay: min(max, initial * 2**n) times a random 0.5..1
    backoff_max_s: float = 5.0
    ack_timeout_s: float = 0.5  # completed() waits this long for the sidecar's ng_perf (not while it is down)
    handoff_interval_s: float = 0.01  # sync facade: how often its thread collects what callers handed over
    close_timeout_s: float = 5.0  # closing tries this long to deliver; the rest is spooled or dropped
    clock: Callable[[], float] = time.time  # stamps each event (at, started_at, ended_at): rates, timeline

    def __post_init__(self) -> None:
        for names, low, bound in (
            (("max_batch_events", "max_batch_bytes", "max_buffered_events", "max_buffered_bytes"), 1, ">= 1"),
            (("linger_s", "backoff_initial_s", "ack_timeout_s", "close_timeout_s"), 0, ">= 0"),
            (("handoff_interval_s", "fsync_interval_s"), 0, "> 0"),
        ):
            for name in names:
                value = getattr(self, name)
                if not (value > low if bound == "> 0" else value >= low):
                    raise ValueError(f"ClientConfig.{name} must be {bound}, got {value!r}")
        if self.fsync not in ("always", "interval", "never"):
            raise ValueError(f"ClientConfig.fsync must be always|interval|never, got {self.fsync!r}")


@dataclass(slots=True)
class ClientStats:
    """Counters since the client started (events, not requests, unless named so)."""

    submitted: int = 0
    sent: int = 0  # acknowledged by the sidecar (accepted or duplicate)
    duplicates: int = 0  # acknowledged as already journaled (a retry: nothing double counted)
    retried: int = 0  # deliveries repeated after a failed or timed-out request
    spooled: int = 0  # written to the on-disk spool
    dropped: int = 0  # lost: buffer and spool full, or undelivered when the client closed
    rejected: int = 0  # refused by the sidecar (4xx other than an unknown run): a client bug, logged
    requests: int = 0
    failed_requests: int = 0
    local_ng_perf: int = 0  # completed() answers built locally (the sidecar did not answer in time)
    local_drain_margin: int = 0  # drain_margin() answers from the local tracker (sidecar down or slow)
    buffered: int = 0  # in memory right now
    spool_pending_bytes: int = 0  # unsent in the spool right now
    connected: bool = True  # False after a failed request, until the next success
    last_error: str | None = field(default=None)
