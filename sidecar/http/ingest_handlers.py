"""The ingest routes: ``POST /v1/runs/{run_id}/events`` and ``/lines`` (docs/http-api.md):
caps checked as the body arrives, events validated one by one off the loop, answered after commit."""

from __future__ import annotations

import contextlib
import hmac
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import msgspec
import orjson
import structlog
from pydantic import TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive

from sidecar.http.errors import RequestError, json_response
from sidecar.http.json_bodies import BodyTooDeep, EventSplitter, TooManyEvents, dumps_json, line_text
from sidecar.http.responses import IngestBody
from sidecar.http.service import Service
from sidecar.ingest.answers import EventOutcome, IdentityTooLong, TooManyRuns, UnknownRun
from sidecar.ingest.events import (
    EVENT_KINDS,
    MAX_EVENTS_PER_REQUEST,
    MEMBER_SPANS,
    Event,
    RowUnreadable,
    RunStarted,
    SentRow,
)
from sidecar.ingest.plans import PlanError
from sidecar.journal import JournalUnavailable
from sidecar.state.accounting import identity_chars
from sidecar.wire import RUN_ID_PATTERN

__all__ = ["IngestHandlers"]

_log = structlog.get_logger("sidecar.http.app")


_EVENT: TypeAdapter[Event] = TypeAdapter(Event)
_Parse = Callable[[list[bytes]], list[Event]]
_LINE_PARAMS: dict[str, type] = {"line_number": int, "generation": int, "seconds": float, "latency_ms": float}


_COMPLETED = b'"completed"'


def _event_value(view: memoryview) -> Any:
    """An event as the models read it: each value parsed by orjson, but a completion's object
    row, kept as the bytes sent."""
    try:
        keys = MEMBER_SPANS.decode(view)
    except msgspec.DecodeError:  # not an object: the models say why
        return orjson.loads(view)
    completed = "kind" in keys and bytes(keys["kind"]) == _COMPLETED
    value: dict[str, Any] = {}
    for key, span in keys.items():
        data = memoryview(span)
        if completed and key == "row" and data[:1].tobytes() == b"{":
            value[key] = SentRow(bytes(data))
        else:
            value[key] = orjson.loads(data)
    return value


def _validate(index: int, value: Any) -> Event:
    """One event, validated by the models; a refusal names ``events.<index>.<field>``."""
    try:
        return _EVENT.validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        parts = [str(part) for part in first["loc"] if part not in EVENT_KINDS]
        if first["type"] in ("union_tag_invalid", "union_tag_not_found"):
            parts.append("kind")
        detail = f"{first['msg']} ({exc.error_count()} error(s))"
        raise RequestError(422, "validation", detail, ".".join(["events", str(index), *parts])) from exc


def parse_events(body: bytes | bytearray, max_depth: int = 1024) -> list[Event]:
    """The events of a whole ingest body (a JSON array, or ``{"events": [...]}``); a completion's
    object row stays the bytes sent (:class:`SentRow`)."""
    splitter = EventSplitter(MAX_EVENTS_PER_REQUEST, max_depth)
    _feed(splitter, [bytes(body)])
    return _events(splitter)


def _feed(splitter: EventSplitter, chunks: list[bytes]) -> None:
    """Split ``chunks`` on a worker thread (short C calls: the loop gets the GIL back between
    them); past a cap the body is refused before it is read on."""
    with _worded():
        for chunk in chunks:
            splitter.feed(chunk)


def _events(splitter: EventSplitter) -> list[Event]:
    """The body's events once it was all fed, each validated (on a worker thread)."""
    with _worded():
        spans = splitter.finish()
    if not spans:
        raise RequestError(422, "validation", "a batch holds at least one event", "events")
    events = []
    for index, span in enumerate(spans):
        try:
            value = _event_value(memoryview(span))
        except orjson.JSONDecodeError as exc:
            detail = f"event {index} is not valid JSON: {exc}"
            raise RequestError(400, "invalid_json", detail, "body") from exc
        events.append(_validate(index, value))
    return events


@contextlib.contextmanager
def _worded() -> Iterator[None]:
    """The splitter's refusals as the API's errors."""
    try:
        yield
    except TooManyEvents as exc:
        raise _too_many(str(exc)) from None
    except BodyTooDeep as exc:
        raise RequestError(400, "too_deep", str(exc), "body") from None
    except msgspec.ValidationError as exc:
        detail = f'give a JSON array of events, or {{"events": [...]}} ({exc})'
        raise RequestError(422, "validation", detail, "events") from exc
    except msgspec.DecodeError as exc:
        raise RequestError(400, "invalid_json", f"body is not valid JSON: {exc}", "body") from exc


def _too_many(what: str) -> RequestError:
    detail = f"{what}; at most {MAX_EVENTS_PER_REQUEST} events per request (send several batches)"
    return RequestError(413, "too_large", detail, "events")


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


#: Body bytes read before they are split on a worker thread (reading waits for it).
_SPLIT_EVERY = 256 * 1024


def _answer(run_id: str, outcomes: list[EventOutcome]) -> bytes:
    answer: IngestBody = {"run_id": run_id, "results": [o.as_dict(i) for i, o in enumerate(outcomes)]}
    return dumps_json(answer)


def _too_many_runs(held: int) -> RequestError:
    detail = f"the service holds {held} runs, its --max-runs cap; end runs (they are dropped after "
    return RequestError(429, "too_many_runs", detail + "--retain-ended) or raise the cap", "run_id")


class IngestHandlers:
    """The ingest routes over ``service``; ``require_ready`` refuses while the journal replays
    (:meth:`sidecar.http.read_handlers.ReadHandlers.require_ready`)."""

    def __init__(self, service: Service, require_ready: Callable[[], None]) -> None:
        self.service = service
        self.settings = service.settings
        self.require_ready = require_ready
        self._cpu = service.ingestor.cpu

    def _authorize(self, header: str | None) -> None:
        """Refuse a request whose ``Authorization`` header does not carry the bearer token."""
        token = self.settings.token
        if token is None:
            return
        scheme, _, given = (header or "").partition(" ")
        expected = token.get().encode()
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), expected):
            detail, bearer = "a valid bearer token is required", {"WWW-Authenticate": "Bearer"}
            raise RequestError(401, "unauthorized", detail, "authorization", bearer)

    async def _body(
        self, receive: Receive, declared: int | None, splitter: EventSplitter | None
    ) -> list[bytes]:
        """The body's chunks, at most the cap (or its ``Content-Length``); with ``splitter``, fed
        to it on a worker thread every :data:`_SPLIT_EVERY` bytes instead (so a body past the
        event cap is refused early), and none returned."""
        cap = self.settings.body_cap if declared is None else declared
        parts: list[bytes] = []
        size = pending = 0
        async for chunk in _chunks(receive):
            size += len(chunk)
            if size > cap:
                if declared is None:
                    raise RequestError(413, "too_large", f"body exceeds the {cap}-byte cap", "body")
                detail = f"body longer than its Content-Length {declared}"
                raise RequestError(400, "bad_request", detail, "body")
            parts.append(chunk)
            pending += len(chunk)
            if splitter is not None and pending >= _SPLIT_EVERY:
                await anyio.to_thread.run_sync(_feed, splitter, parts, limiter=self._cpu)
                parts, pending = [], 0
        if splitter is not None and parts:
            await anyio.to_thread.run_sync(_feed, splitter, parts, limiter=self._cpu)
            parts = []
        if declared is not None and size < declared:
            detail = f"body of {size} bytes is shorter than its Content-Length {declared}"
            raise RequestError(400, "bad_request", detail, "body")
        return parts

    def _check_caps(self, run_id: str, events: list[Event]) -> None:
        """The service's caps on what one batch may add (``--max-runs`` is checked again at commit)."""
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
                    cap_text = f"over the service's --max-identity-chars cap of {cap}"
                    detail = f"{name} is {chars} characters, {cap_text}"
                    raise RequestError(422, "validation", detail, f"events.{index}.{name}")
        runs = self.service.ingestor.runs
        if creates and run_id not in runs and len(runs) >= settings.max_runs:
            raise _too_many_runs(len(runs))

    def _check_plan(self, index: int, event: RunStarted) -> None:
        plan, settings = event.plan, self.settings
        if plan is None:
            return
        cap, longest = settings.max_identity_chars, max(plan, key=len, default="")
        if len(plan) > settings.max_plan_tasks:
            tasks = settings.max_plan_tasks
            detail = f"plan has {len(plan)} tasks, over the service's --max-plan-tasks cap of {tasks}"
        elif len(longest) > cap:
            detail = (
                f"plan task {longest[:40]!r}... is {len(longest)} characters, over the service's "
                f"--max-identity-chars cap of {cap}"
            )
        else:
            return
        raise RequestError(422, "validation", detail, f"events.{index}.plan")

    def _check_run_id(self, run_id: str) -> None:
        if not RUN_ID_PATTERN.fullmatch(run_id):
            detail = f"run id {run_id[:160]!r} must match {RUN_ID_PATTERN.pattern}"
            raise RequestError(400, "validation", detail, "run_id")

    async def _ingest(self, run_id: str, events: list[Event]) -> bytes:
        """Store ``events`` and answer with their outcomes (a 200's JSON body)."""
        try:
            outcomes = await self.service.ingestor.submit(run_id, events)
        except UnknownRun as exc:
            raise RequestError(404, "unknown_run", str(exc), "run_id") from exc
        except TooManyRuns as exc:
            raise _too_many_runs(exc.held) from exc
        except IdentityTooLong as exc:
            raise RequestError(422, "validation", str(exc), exc.field) from exc
        except RowUnreadable as exc:
            raise RequestError(400, "invalid_json", str(exc), f"events.{exc.index}.row") from exc
        except PlanError as exc:
            raise RequestError(422, "validation", str(exc), f"events.{exc.index}.{exc.field}") from exc
        except JournalUnavailable as exc:
            _log.error("journal unavailable", detail=str(exc))
            raise RequestError(
                503, "journal_unavailable", f"events not stored: {exc}", None, {"Retry-After": "1"}
            ) from exc
        return await anyio.to_thread.run_sync(_answer, run_id, outcomes, limiter=self._cpu)

    def _admit(self, request: Request) -> str:
        """The request's run id, once authorized, well-formed and the service ready."""
        self._authorize(request.headers.get("authorization"))
        run_id: str = request.path_params["run_id"]
        self._check_run_id(run_id)
        self.require_ready()
        return run_id

    async def _store(
        self, request: Request, run_id: str, parse: _Parse, splitter: EventSplitter | None = None
    ) -> Response:
        """Reserve the body against ``--max-body-bytes-in-flight`` (its declared length, else the
        cap) before reading it, parse and check it off the loop, store it, answer after commit."""
        header, cap = request.headers.get("content-length"), self.settings.body_cap
        declared = int(header) if header is not None and header.isdigit() else None
        size = cap if declared is None else declared
        if size > cap:
            detail = f"body of {declared} bytes exceeds the {cap}-byte cap"
            raise RequestError(413, "too_large", detail, "body")
        limit = self.settings.max_body_bytes_in_flight
        service = self.service
        held = service.body_bytes_held
        if held + size > limit:
            detail = f"{held} body bytes are being processed; this request's {size} would pass the "
            detail += f"service's --max-body-bytes-in-flight cap of {limit}; retry"
            raise RequestError(503, "busy", detail, "body", {"Retry-After": "1"})
        service.body_bytes_held += size
        try:
            parts = await self._body(request.receive, declared, splitter)
            events = await anyio.to_thread.run_sync(self._checked, run_id, parse, parts, limiter=self._cpu)
            del parts  # parsed: the raw body need not stay resident while the batch is stored
            return json_response(await self._ingest(run_id, events))
        finally:
            service.body_bytes_held -= size

    def _checked(self, run_id: str, parse: _Parse, parts: list[bytes]) -> list[Event]:
        events = parse(parts)
        self._check_caps(run_id, events)
        return events

    async def events(self, request: Request) -> Response:
        """``POST /v1/runs/{run_id}/events``: a batch of events."""
        run_id = self._admit(request)
        splitter = EventSplitter(MAX_EVENTS_PER_REQUEST, self.settings.max_json_depth)
        return await self._store(request, run_id, lambda _: _events(splitter), splitter)

    async def lines(self, request: Request) -> Response:
        """One raw rollout line as the body: a ``completed`` event with ``line`` (query:
        ``line_number``, ``generation``, ``seconds``, ``latency_ms``)."""
        run_id = self._admit(request)
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
        return await self._store(request, run_id, lambda parts: _line_event(event, parts))


def _line_event(event: dict[str, Any], parts: list[bytes]) -> list[Event]:
    """The line's ``completed`` event (on a worker thread)."""
    body = b"".join(parts)
    with memoryview(body) as view:  # no copy of the body without its newline
        event["line"] = line_text(view[:-1] if body.endswith(b"\n") else view)
    return [_validate(0, event)]
