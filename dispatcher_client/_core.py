"""What the async and the sync client share: identity, errors, the local fallbacks, and every
event call's bookkeeping (number it, feed the local tracker, build the event).

Both clients fail open in the same way: a local :class:`DispatchLatencyTracker` fed with the
client's own events answers the drain margin while the sidecar is down or slow (then for a
second before asking again), and ``ng_perf`` is built locally when no answer comes. There is
one core per client: :class:`~dispatcher_client.SidecarClient` is one, and
:class:`~dispatcher_client.SyncSidecarClient` is a facade over the ``SidecarClient`` it runs on
its background loop (one source, one sequence, one local tracker); the two only differ in how
they move the events.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Mapping
from typing import Any

import httpx

from sidecar.perf import DispatchLatencyTracker, build_ng_perf
from sidecar.wire import RUN_ID_PATTERN, EventNumber, source_id

from ._events import (
    completed_event,
    drained_event,
    failed_event,
    progress_event,
    run_ended_event,
    run_started_event,
)
from .config import ClientConfig, ClientStats, resolve_token

__all__ = [
    "ClientClosed",
    "ClientCore",
    "SidecarAuthError",
    "SidecarError",
    "SidecarUnreachable",
    "read_error",
    "renamed_timeout",
]

#: How long reads go to the local tracker after the sidecar failed to answer one.
_READS_DOWN_S = 1.0


class SidecarError(RuntimeError):
    """A read (drain margin, report) the sidecar could not answer.

    ``status`` is the HTTP status of its answer and ``response`` the answer itself; both are
    ``None`` when no answer came (unreachable, timed out).
    """

    def __init__(self, message: str, *, status: int | None = None, response: httpx.Response | None = None):
        super().__init__(message)
        self.status = status
        self.response = response


class ClientClosed(SidecarError):
    """The client is not open (never opened, or closed): nothing can be sent or read."""


class SidecarUnreachable(SidecarError):
    """No sidecar answered at the client's URL (refused, timed out, name not found)."""


class SidecarAuthError(SidecarError):
    """The sidecar refused this client's bearer token (HTTP 401/403), on the read itself or on
    the events before it: a read of a run whose events were refused finds no such run, and
    the refusal, not the missing run, is what needs fixing."""


_TOKEN_FIX = "set $ROLLOUT_SIDECAR_TOKEN, or pass token=..., to the token the service reads from --token-file"


def read_error(
    base_url: str,
    path: str,
    *,
    run_id: str,
    stats: ClientStats,
    error: httpx.HTTPError | None = None,
    response: httpx.Response | None = None,
) -> SidecarError:
    """The error of a read that got no answer (``error``) or a non-200 one (``response``), in
    one line naming the URL and the cause."""
    if response is None:
        cause = f"{type(error).__name__}: {error}" if error is not None else "no answer"
        return SidecarUnreachable(
            f"cannot reach the sidecar at {base_url}: GET {path} failed ({cause}); "
            "is `rollout-sidecar serve` running there?"
        )
    status = response.status_code
    if status in (401, 403):
        return SidecarAuthError(
            f"the sidecar at {base_url} refused this client's token: GET {path} answered HTTP {status} "
            f"(no or wrong bearer token; {_TOKEN_FIX})",
            status=status,
            response=response,
        )
    refused = stats.last_error or ""
    if status == 404 and b"unknown_run" in response.content and refused.startswith(("HTTP 401", "HTTP 403")):
        return SidecarAuthError(
            f"the sidecar at {base_url} has no run {run_id!r} because it refused this client's events "
            f"with {refused.split(':', 1)[0]} (no or wrong bearer token; {_TOKEN_FIX})",
            status=status,
            response=response,
        )
    return SidecarError(
        f"GET {base_url}{path}: HTTP {status}: {response.text[:300]}", status=status, response=response
    )


def renamed_timeout(timeout_s: float | None, timeout: float | None, default: float | None) -> float | None:
    """``timeout_s``, or the deprecated ``timeout`` keyword it replaced (with a warning)."""
    if timeout is not None:
        warnings.warn("'timeout' is deprecated: pass timeout_s", DeprecationWarning, stacklevel=3)
        if timeout_s is None:
            return timeout
    return default if timeout_s is None else timeout_s


class ClientCore:
    """The state and rules both clients share; not used on its own."""

    def __init__(
        self,
        base_url: str,
        *,
        run_id: str,
        token: str | None,
        config: ClientConfig | None,
        transport: httpx.AsyncBaseTransport | None,
        stats: ClientStats | None = None,
    ) -> None:
        if not RUN_ID_PATTERN.fullmatch(run_id):
            raise ValueError(f"run id {run_id!r} must match {RUN_ID_PATTERN.pattern}")
        self.base_url = base_url.rstrip("/")
        self.run_id = run_id
        self.config = config or ClientConfig()
        self.stats = stats if stats is not None else ClientStats()
        self._token = resolve_token(token)
        self._transport = transport
        #: This client's own events in a local tracker: the drain margin when the sidecar is not there.
        self.local = DispatchLatencyTracker()
        self._run_margin: float | None = None
        self._reads_down_until = 0.0
        #: This client instance's name in event identities; ``next_number`` numbers its events.
        self.source = source_id()
        self._seq = itertools.count()

    def next_number(self) -> EventNumber:
        """A fresh ``(source, seq)`` event identity (thread-safe: one atomic counter step)."""
        return EventNumber(self.source, next(self._seq))

    def _closed_error(self) -> ClientClosed:
        name = type(self).__name__
        return ClientClosed(f"{name} is not open: use it as a context manager, or open it first")

    def _auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._token}"} if self._token else {}

    def _run_started(
        self,
        plan: Mapping[Any, int] | None,
        dispatch_budget_s: float | None,
        drain_margin_s: float | None,
        materialized_inputs: str | None,
        fields: Mapping[str, Any],
    ) -> dict[str, Any]:
        """The ``run_started`` event, stamped with its start (unless ``fields`` give one); its
        ``drain_margin_s`` becomes the local fallback's default."""
        if drain_margin_s is not None:
            self._run_margin = drain_margin_s
        return run_started_event(
            plan=plan,
            dispatch_budget_s=dispatch_budget_s,
            drain_margin_s=drain_margin_s,
            materialized_inputs=materialized_inputs,
            fields={"started_at": self.config.clock(), **fields},
        )

    def _completion(
        self,
        row: Mapping[str, Any] | None,
        result: Mapping[str, Any],
        seconds: float,
        latency_ms: float | None,
    ) -> dict[str, Any]:
        """A numbered ``completed`` event, its duration recorded locally."""
        self.local.record(seconds)
        return completed_event(row, result, seconds, latency_ms, self.next_number(), self.config.clock())

    def _failure(
        self, row: Mapping[str, Any] | None, failure_row: Mapping[str, Any], seconds: float | None
    ) -> dict[str, Any]:
        """A numbered ``failed`` event, its duration (when known) recorded locally."""
        if seconds is not None:
            self.local.record_failure(seconds)
        return failed_event(row, failure_row, seconds, self.next_number(), self.config.clock())

    def _drain(self, row: Mapping[str, Any] | None, result: Mapping[str, Any] | None) -> dict[str, Any]:
        """A numbered ``drained`` event, recorded locally."""
        self.local.record_drained()
        return drained_event(row, result, self.next_number(), self.config.clock())

    def _progress(self, kind: str, row: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """A ``started`` / ``heartbeat`` event; ``None`` (counted as rejected) for a row without
        a task index, which cannot be tracked."""
        event = progress_event(kind, row, self.config.clock())
        if event is None:
            self.stats.submitted += 1
            self.stats.rejected += 1
        return event

    def _ended(self) -> dict[str, Any]:
        """The ``run_ended`` event, stamped with the end."""
        return run_ended_event(ended_at=self.config.clock())

    def _ask_sidecar(self, now: float, strict: bool) -> bool:
        """Whether a drain-margin read goes to the sidecar (else to the local tracker)."""
        return strict or (self.stats.connected and now >= self._reads_down_until)

    def _sidecar_unanswered(self, now: float) -> None:
        self._reads_down_until = now + _READS_DOWN_S

    def _local_drain_margin(self, configured: float | None) -> float | None:
        self.stats.local_drain_margin += 1
        return self.local.drain_margin(configured if configured is not None else self._run_margin)

    def _local_ng_perf(
        self, result: Mapping[str, Any], seconds: float, latency_ms: float | None
    ) -> dict[str, Any] | None:
        self.stats.local_ng_perf += 1
        return build_ng_perf(result, latency_ms if latency_ms is not None else seconds * 1000.0)
