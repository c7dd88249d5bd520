"""The ingest routes: ``POST /v1/runs/{run_id}/events`` (a batch of events) and
``POST /v1/runs/{run_id}/lines`` (one raw rollout line).

A request is authorized, its body reserved against the in-flight cap and read at most to the
body cap, parsed once (rows kept as their bytes where the vetter covers the body), checked
against the service's caps and handed to the ingestor; the answer is sent after the commit.
The bearer token is compared in constant time and never logged; no row content is ever logged.
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import orjson
import structlog
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from sidecar.http.errors import RequestError, json_response
from sidecar.http.json_bodies import dumps_json, line_text, too_deep
from sidecar.http.responses import IngestBody
from sidecar.http.service import Service
from sidecar.ingest.answers import IdentityTooLong, TooManyRuns, UnknownRun
from sidecar.ingest.events import (
    EVENT_KINDS,
    MAX_EVENTS_PER_REQUEST,
    Completed,
    Event,
    EventBatch,
    RunStarted,
)
from sidecar.ingest.plans import PlanError
from sidecar.ingest.raw_rows import RawRow, decode_request, row_spans
from sidecar.journal import JournalUnavailable
from sidecar.state.accounting import identity_chars
from sidecar.wire import RUN_ID_PATTERN

__all__ = ["IngestHandlers"]

_log = structlog.get_logger("sidecar.http.app")


def _field_of(error: Any) -> str:
    parts = [str(part) for part in error["loc"] if part not in EVENT_KINDS]
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        parts.append("kind")
    return ".".join(["events", *parts])


_LINE_PARAMS: dict[str, type] = {"line_number": int, "generation": int, "seconds": float, "latency_ms": float}


def _validate(parsed: Any) -> list[Event]:
    try:
        return EventBatch.validate_python(parsed)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        raise RequestError(
            422, "validation", f"{first['msg']} ({exc.error_count()} error(s))", _field_of(first)
        ) from exc


def _with_raw_rows(events: list[Event], body: bytes | bytearray) -> list[Event]:
    """``events`` with each completion's row as the bytes it was sent as, so its content hash is
    the one the raw path computes for the same row (a retry is a duplicate whichever path the
    body took)."""
    if not any(isinstance(event, Completed) and isinstance(event.row, dict) for event in events):
        return events
    spans = row_spans(body)
    if spans is None or len(spans) != len(events):
        return events
    return [
        event.model_copy(update={"row": RawRow(span, vetted=False, parsed=event.row)})
        if isinstance(event, Completed) and isinstance(event.row, dict)
        else event
        for event, span in zip(events, spans, strict=True)
    ]


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    """The request body's non-empty chunks as they arrive; a client that closes the connection
    before the body's end is refused."""
    more = True
    while more:
        message = await receive()
        kind = message["type"]
        if kind == "http.request":
            more = message.get("more_body", False)
            chunk = message.get("body", b"")
            if chunk:
                yield chunk
        elif kind == "http.disconnect":
            raise RequestError(400, "bad_request", "the client closed the connection mid-body", "body")


class _Envelope(msgspec.Struct):
    events: list[msgspec.Raw]


_COUNTER = msgspec.json.Decoder(list[msgspec.Raw] | _Envelope)


def _check_event_count(body: bytes | bytearray) -> None:
    """Refuse a batch of more than ``MAX_EVENTS_PER_REQUEST`` events from one scan of the body
    that builds none of them (each event stays a view of the body's bytes); a body this scan
    cannot read is left to the parser, which says why."""
    try:
        decoded = _COUNTER.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return
    count = len(decoded if isinstance(decoded, list) else decoded.events)
    if count > MAX_EVENTS_PER_REQUEST:
        raise RequestError(
            413,
            "too_large",
            f"{count} events in one request; at most {MAX_EVENTS_PER_REQUEST} (send several batches)",
            "events",
        )


def _too_many_runs(held: int) -> RequestError:
    return RequestError(
        429,
        "too_many_runs",
        f"the service holds {held} runs, its --max-runs cap; end runs (they are dropped "
        "after --retain-ended) or raise the cap",
        "run_id",
    )


class IngestHandlers:
    """The ingest routes over ``service``; ``require_ready`` refuses while the journal replays
    (:meth:`sidecar.http.read_handlers.ReadHandlers.require_ready`)."""

    def __init__(self, service: Service, require_ready: Callable[[], None]) -> None:
        self.service = service
        self.settings = service.settings
        self.require_ready = require_ready
        self._held = 0

    # -- helpers --------------------------------------------------------------------------

    def _authorize(self, header: str | None) -> None:
        """Refuse a request whose ``Authorization`` header does not carry the bearer token."""
        token = self.settings.token
        if token is None:
            return
        scheme, _, given = (header or "").partition(" ")
        expected = token.get().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            raise RequestError(
                401,
                "unauthorized",
                "a valid bearer token is required",
                "authorization",
                {"WWW-Authenticate": "Bearer"},
            )

    async def _body(self, receive: Receive, declared: int | None) -> bytes | bytearray:
        """The whole body, at most the cap. With a declared length it is read straight into one
        buffer of that size (no list of chunks joined into a second copy at the end)."""
        cap = self.settings.body_cap
        if declared is not None:
            return await self._body_into(receive, declared)
        chunks: list[bytes] = []
        size = 0
        async for chunk in _chunks(receive):
            size += len(chunk)
            if size > cap:
                raise RequestError(413, "too_large", f"body exceeds the {cap}-byte cap", "body")
            chunks.append(chunk)
        return b"".join(chunks)

    async def _body_into(self, receive: Receive, declared: int) -> bytes | bytearray:
        """A body of ``declared`` bytes. One that arrives as one chunk (the usual case: the HTTP
        layer gathers what has arrived before the handler reads) is that chunk, never copied;
        else the chunks are written into one buffer of the declared size."""
        first = b""
        buffer: bytearray | None = None
        size = 0
        async for chunk in _chunks(receive):
            end = size + len(chunk)
            if end > declared:  # the HTTP layer enforces Content-Length; never write past it
                raise RequestError(
                    400, "bad_request", f"body longer than its Content-Length {declared}", "body"
                )
            if not size:
                first = chunk
            else:
                if buffer is None:
                    buffer = bytearray(declared)
                    buffer[:size] = first
                buffer[size:end] = chunk
            size = end
        if size < declared:
            raise RequestError(
                400,
                "bad_request",
                f"body of {size} bytes is shorter than its Content-Length {declared}",
                "body",
            )
        return first if buffer is None else buffer

    def _check_caps(self, run_id: str, events: list[Event]) -> None:
        """The service's configurable caps on what one batch may add to its state.

        A first check, before any row is read further; the ingestor checks ``--max-runs`` again
        atomically with the commit, and identities read from rows once they are derived.
        """
        settings = self.settings
        cap = settings.max_identity_chars
        creates = False
        for index, event in enumerate(events):
            if isinstance(event, RunStarted):
                creates = True
                self._check_plan(index, event)
            for name in ("task_index", "rollout_index"):
                value = getattr(event, name, None)
                if isinstance(value, str):
                    chars = len(value)
                elif type(value) is int and (cap < 20 or value.bit_length() > 63):
                    chars = identity_chars(value)
                else:
                    continue
                if chars > cap:
                    raise RequestError(
                        422,
                        "validation",
                        f"{name} is {chars} characters, over the service's --max-identity-chars cap of {cap}",
                        f"events.{index}.{name}",
                    )
        runs = self.service.ingestor.runs
        if creates and run_id not in runs and len(runs) >= settings.max_runs:
            raise _too_many_runs(len(runs))

    def _check_plan(self, index: int, event: RunStarted) -> None:
        plan, settings = event.plan, self.settings
        if plan is None:
            return
        if len(plan) > settings.max_plan_tasks:
            raise RequestError(
                422,
                "validation",
                f"plan has {len(plan)} tasks, over the service's --max-plan-tasks cap of "
                f"{settings.max_plan_tasks}",
                f"events.{index}.plan",
            )
        cap = settings.max_identity_chars
        longest = max(plan, key=len, default="")
        if len(longest) > cap:
            raise RequestError(
                422,
                "validation",
                f"plan task {longest[:40]!r}... is {len(longest)} characters, over the service's "
                f"--max-identity-chars cap of {cap}",
                f"events.{index}.plan",
            )

    def _check_run_id(self, run_id: str) -> None:
        if not RUN_ID_PATTERN.fullmatch(run_id):
            raise RequestError(
                400,
                "validation",
                f"run id {run_id[:160]!r} must match {RUN_ID_PATTERN.pattern}",
                "run_id",
            )

    @asynccontextmanager
    async def _held_body(self, declared: str | None, receive: Receive) -> AsyncIterator[bytes | bytearray]:
        """The request body, counted against ``max_body_bytes_in_flight`` until the block ends.

        What a request declares is reserved before a byte is read (a body without a length
        reserves the cap), so concurrent large bodies are refused with 503 instead of being
        buffered side by side.
        """
        cap = self.settings.body_cap
        size = int(declared) if declared is not None and declared.isdigit() else cap
        if size > cap:
            raise RequestError(
                413, "too_large", f"body of {declared} bytes exceeds the {cap}-byte cap", "body"
            )
        limit = self.settings.max_body_bytes_in_flight
        if self._held + size > limit:
            raise RequestError(
                503,
                "busy",
                f"{self._held} body bytes are being processed; this request's {size} would pass the "
                f"service's --max-body-bytes-in-flight cap of {limit}; retry",
                "body",
                {"Retry-After": "1"},
            )
        self._held += size
        try:
            yield await self._body(
                receive, int(declared) if declared is not None and declared.isdigit() else None
            )
        finally:
            self._held -= size

    def _parse_events(self, body: bytes | bytearray) -> list[Event]:
        """The request's events, read once: a vetted body with its rows kept as bytes
        (``sidecar.ingest.raw_rows``), any other body parsed and refused exactly as the models say.

        Runs on a worker thread (never on the event loop), and refuses a batch of more than
        ``MAX_EVENTS_PER_REQUEST`` events after one scan that builds none of them."""
        _check_event_count(body)
        decoded = decode_request(body, self.settings.max_json_depth)
        if decoded is not None:
            return _validate(decoded)
        return _with_raw_rows(self._parse_in_full(body), body)

    def _parse_in_full(self, body: bytes | bytearray) -> list[Event]:
        if too_deep(body, self.settings.max_json_depth):
            raise RequestError(
                400, "too_deep", f"JSON nesting exceeds {self.settings.max_json_depth} levels", "body"
            )
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise RequestError(400, "invalid_json", f"body is not valid JSON: {exc}", "body") from exc
        if isinstance(parsed, dict) and set(parsed) == {"events"}:
            parsed = parsed["events"]
        return _validate(parsed)

    async def _ingest(self, run_id: str, events: list[Event]) -> bytes:
        """Store ``events`` and answer with their outcomes (a 200's JSON body)."""
        self._check_caps(run_id, events)
        try:
            outcomes = await self.service.ingestor.submit(run_id, events)
        except UnknownRun as exc:
            raise RequestError(404, "unknown_run", str(exc), "run_id") from exc
        except TooManyRuns as exc:
            raise _too_many_runs(exc.held) from exc
        except IdentityTooLong as exc:
            raise RequestError(422, "validation", str(exc), exc.field) from exc
        except PlanError as exc:
            raise RequestError(422, "validation", str(exc), f"events.{exc.index}.{exc.field}") from exc
        except JournalUnavailable as exc:
            _log.error("journal unavailable", detail=str(exc))
            raise RequestError(
                503, "journal_unavailable", f"events not stored: {exc}", None, {"Retry-After": "1"}
            ) from exc
        answer: IngestBody = {"run_id": run_id, "results": [o.as_dict(i) for i, o in enumerate(outcomes)]}
        return dumps_json(answer)

    async def events(self, request: Request) -> Response:
        """``POST /v1/runs/{run_id}/events``: a batch of events."""
        run_id = request.path_params["run_id"]
        self._authorize(request.headers.get("authorization"))
        self._check_run_id(run_id)
        self.require_ready()
        async with self._held_body(request.headers.get("content-length"), request.receive) as body:
            events = await anyio.to_thread.run_sync(self._parse_events, body)
            del body  # parsed: the raw body need not stay resident while the batch is stored
            return json_response(await self._ingest(run_id, events))

    async def lines(self, request: Request) -> Response:
        """One raw rollout line as the body (no JSON escaping): a ``completed`` event with ``line``.

        Query: ``line_number`` (required), ``generation``, ``seconds``, ``latency_ms``; a
        follower sends a line this way when escaping it into an event would pass the body cap.
        """
        run_id = request.path_params["run_id"]
        self._authorize(request.headers.get("authorization"))
        self._check_run_id(run_id)
        self.require_ready()
        event: dict[str, Any] = {"kind": "completed"}
        for name, kind in _LINE_PARAMS.items():
            raw = request.query_params.get(name)
            if raw is None:
                continue
            try:
                event[name] = kind(raw)
            except ValueError as exc:
                detail = f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw[:40]!r}"
                raise RequestError(400, "validation", detail, name) from exc
        if "line_number" not in event:
            raise RequestError(400, "validation", "line_number is required", "line_number")
        async with self._held_body(request.headers.get("content-length"), request.receive) as body:
            with memoryview(body) as view:  # no copy of the body without its newline
                event["line"] = line_text(view[:-1] if body.endswith(b"\n") else view)
            del body
            events = await anyio.to_thread.run_sync(_validate, [event])
            return json_response(await self._ingest(run_id, events))
