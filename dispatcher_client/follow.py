"""The follower: turns an unmodified NeMo Gym run directory into sidecar events.

It tails ``<stem>.jsonl`` (each non-blank physical line a ``completed`` event carrying the raw
``line`` and its ``line_number``, so the sidecar digests exactly the bytes the batch
``health-check`` reads) and ``<stem>_failures.jsonl`` (each readable row a ``failed`` event),
and reads ``<stem>_materialized_inputs.jsonl`` for the plan as the sidecar would. How it stays
exact across restarts, truncations, crashes and outages (generations, checkpoints, sent
ranges) is described in ``docs/client.md`` ("How the follower stays exact").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from health.registry import CHECK_IDS
from sidecar.wire import (
    EventKind,
    FollowerState,
    MaterializedInputsError,
    materialized_lines,
    plan_from_lines,
)

from ._events import run_ended_event
from ._tail import FilePosition, SentRange, TailRead, is_blank_line, read_new_lines
from .client import SidecarClient
from .config import ClientConfig

__all__ = ["FollowPaths", "Follower", "FollowerError", "FollowerThread", "follow_paths", "run_follower"]

_log = logging.getLogger("dispatcher_client.follow")
_CHUNK_EVENTS = 256
#: The sidecar's ``latency_ms`` range: a row's latency outside it is not sent (the sidecar would
#: refuse the event, and with it the line).
_MAX_LATENCY_MS = 1e10
_RAW = "_raw_line"
_TOKEN_HINT = "check the bearer token (--token-file or $ROLLOUT_SIDECAR_TOKEN)"
_CAP_HINT = "raise the sidecar's cap with `rollout-sidecar serve --body-cap SIZE`"


def _refusal_hint(error: str | None) -> str:
    text = error or ""
    if text.startswith(("HTTP 401", "HTTP 403")):
        return _TOKEN_HINT
    if text.startswith("HTTP 413"):
        return _CAP_HINT
    return "fix the cause the sidecar names"


class FollowerError(RuntimeError):
    """The follower cannot go on without losing lines; its checkpoint is left where it was."""


@dataclass(frozen=True, slots=True)
class FollowPaths:
    """The files of one run directory, named as NeMo Gym names them (``<stem>.jsonl``,
    ``<stem>_failures.jsonl``, ``<stem>_materialized_inputs.jsonl``)."""

    rollouts: Path
    failures: Path
    materialized: Path
    source_path: str
    """The rollouts path as ``health_check_run_dir(run_dir, rollout_file)`` spells it in locators."""


def follow_paths(
    run_dir: str | os.PathLike[str], rollouts_file: str | os.PathLike[str] | None = None
) -> FollowPaths:
    directory = Path(run_dir)
    selected = Path(rollouts_file) if rollouts_file is not None else Path("rollouts.jsonl")
    rollouts = selected if selected.is_absolute() else directory / selected
    stem = rollouts.stem if rollouts.suffix else rollouts.name
    return FollowPaths(
        rollouts=rollouts,
        failures=rollouts.with_name(f"{stem}_failures.jsonl"),
        materialized=rollouts.with_name(f"{stem}_materialized_inputs.jsonl"),
        source_path=str(rollouts),
    )


def _plan(path: Path) -> dict[str, int] | None:
    """Repeats per ``str(_ng_task_index)`` over the materialized inputs; ``None`` if absent.

    Read as the sidecar reads a ``materialized_inputs`` path (:func:`sidecar.wire.plan_from_lines`):
    a line that is not a JSON object with ``_ng_task_index`` stops the follower, as the sidecar
    would refuse the plan.
    """
    try:
        handle = open(path, "rb", buffering=0)  # noqa: SIM115 (closed below)
    except OSError:
        return None
    with handle:
        try:
            return plan_from_lines(materialized_lines(handle))
        except MaterializedInputsError as exc:
            raise FollowerError(f"{path}: {exc}; fix the materialized inputs, then rerun") from None
        except OSError as exc:
            raise FollowerError(f"{path}: cannot read the materialized inputs: {exc}") from None


def _text(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError:
        return "\ufffd" + line.decode("utf-8", "replace")


def _row_latency_ms(line: bytes) -> int | float | None:
    """The row's ``ng_perf.total_latency_ms`` (NeMo Gym's measured latency), as written."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    perf = row.get("ng_perf") if isinstance(row, dict) else None
    latency = perf.get("total_latency_ms") if isinstance(perf, dict) else None
    if isinstance(latency, int | float) and not isinstance(latency, bool) and 0 < latency <= _MAX_LATENCY_MS:
        return latency
    return None


class Follower:
    """Follows one run directory into one sidecar run (``await Follower(...).run()``)."""

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        sidecar_url: str,
        run_id: str | None = None,
        rollouts_file: str | os.PathLike[str] | None = None,
        token: str | None = None,
        state_path: str | os.PathLike[str] | None = None,
        poll_interval_s: float = 0.2,
        latency_from_rows: bool = True,
        ignored_checks: Iterable[str] = (),
        client_config: ClientConfig | None = None,
        read_bytes: int = 8 << 20,
        raw_line_bytes: int = 1 << 20,
        give_up_s: float | None = None,
    ) -> None:
        self.paths = follow_paths(run_dir, rollouts_file)
        self.run_id = run_id or Path(os.path.abspath(run_dir)).name
        self.state_path = (
            Path(state_path)
            if state_path is not None
            else Path(run_dir) / f".rollout_sidecar_follow.{self.run_id}.json"
        )
        self.poll_interval_s = poll_interval_s
        self.read_bytes = read_bytes  # per file per read: bounds the follower's memory
        self.latency_from_rows = latency_from_rows
        self.ignored_checks = list(dict.fromkeys(check.strip() for check in ignored_checks if check.strip()))
        unknown = sorted(set(self.ignored_checks) - set(CHECK_IDS))
        if unknown:
            raise ValueError(f"unknown check id(s) in ignored_checks: {', '.join(unknown)}")
        self.client = SidecarClient(
            sidecar_url, run_id=self.run_id, token=token, config=client_config or ClientConfig()
        )
        self.sidecar_url = sidecar_url.rstrip("/")
        self._token = token
        self.raw_line_bytes = raw_line_bytes
        """Lines longer than this go as raw bodies to ``/lines`` (JSON escaping could double them)."""
        self.give_up_s = give_up_s
        """Stop with :class:`FollowerError` after the sidecar was unreachable this long (None: never)."""
        self.unreachable_since: float | None = None
        self.generation = 0
        self.positions = {"rollouts": FilePosition(), "failures": FilePosition()}
        self.sent: dict[str, SentRange] = {}
        """Per file, bytes past the checkpoint sent to the sidecar (it may hold their lines)."""
        self.started = False
        self.lines_sent = 0
        self.restarts = 0
        self._load_state()

    # -- state ----------------------------------------------------------------------------

    def _load_state(self) -> None:
        try:
            body = orjson.loads(self.state_path.read_bytes())
        except FileNotFoundError:
            # Nothing is known of what was sent before: supersede whatever the sidecar holds for
            # this run (a deleted run dir re-run under the same name, a lost state file).
            self.generation = time.time_ns() // 1_000_000
            return
        except (OSError, orjson.JSONDecodeError) as exc:
            raise ValueError(f"unreadable follower state {str(self.state_path)!r}: {exc}") from exc
        if body.get("run_id") != self.run_id or body.get("source_path") != self.paths.source_path:
            raise ValueError(
                f"follower state {str(self.state_path)!r} belongs to run {body.get('run_id')!r} over "
                f"{body.get('source_path')!r}, not {self.run_id!r} over {self.paths.source_path!r}"
            )
        self.generation = int(body["generation"])
        self.positions = {name: FilePosition.from_json(pos) for name, pos in body["files"].items()}
        self.sent = {name: SentRange.from_json(sent) for name, sent in body.get("sent", {}).items()}
        self.started = bool(body.get("started"))

    def _save_state(self) -> None:
        body = {
            "run_id": self.run_id,
            "source_path": self.paths.source_path,
            "generation": self.generation,
            "started": self.started,
            "files": {name: position.as_json() for name, position in self.positions.items()},
            "sent": {name: sent.as_json() for name, sent in self.sent.items()},
        }
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        with open(tmp, "wb") as handle:
            handle.write(orjson.dumps(body))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.state_path)

    # -- events ---------------------------------------------------------------------------

    def _gen(self, event: dict[str, Any]) -> dict[str, Any]:
        if self.generation:
            event["generation"] = self.generation
        return event

    def _start(self) -> None:
        event: dict[str, Any] = {"kind": EventKind.RUN_STARTED.value, "source_path": self.paths.source_path}
        plan = _plan(self.paths.materialized)
        if plan is not None:
            event["plan"] = plan
        if self.ignored_checks:
            event["ignored_checks"] = self.ignored_checks
        self.client.submit_event(self._gen(event))

    def _completion(self, number: int, line: bytes) -> dict[str, Any]:
        event: dict[str, Any] = {"kind": EventKind.COMPLETED.value, "line_number": number}
        if len(line) > self.raw_line_bytes:
            event[_RAW] = line
        else:
            event["line"] = _text(line)
        latency_ms = _row_latency_ms(line)
        if latency_ms is not None:
            event["latency_ms"] = latency_ms  # the sidecar's ng_perf keeps the row's latency
            if self.latency_from_rows:
                event["seconds"] = latency_ms / 1000.0
        return self._gen(event)

    def _failure(self, line: bytes) -> dict[str, Any] | None:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(row, dict):
            return None
        return self._gen({"kind": EventKind.FAILED.value, "row": row})

    async def _restart(self) -> None:
        """A file was replaced or truncated: new generation, every file from the start.

        The generation comes from the clock when that is larger, so a follower killed between
        the sidecar's reset and its own checkpoint still resets the sidecar again on restart.
        """
        self.generation = max(self.generation + 1, time.time_ns() // 1_000_000)
        self.restarts += 1
        self.positions = {name: FilePosition() for name in self.positions}
        self.sent = {}  # of a superseded generation: the sidecar drops it
        _log.info("followed file replaced or truncated: generation %d", self.generation)
        self._start()
        self.started = True
        await self._commit()

    async def _deliver(self, events: list[dict[str, Any]], path: Path, position: FilePosition) -> None:
        """Send ``events`` in acknowledged chunks (one read is at most ``read_bytes`` of lines).

        Should the client drop or the sidecar refuse an event all the same, the checkpoint must
        not move past it: :class:`FollowerError` stops the follower with the checkpoint where it
        was, and a rerun re-sends from there (what the sidecar already acknowledged comes back
        as a duplicate). Long lines go one by one as raw bodies, in file order.
        """
        dropped, rejected = self.client.stats.dropped, self.client.stats.rejected
        queued = 0
        for event in events:
            if _RAW in event:
                if queued:
                    await self._flush()
                    queued = 0
                await self._post_raw(event, path)
                continue
            self.client.submit_event(event)
            queued += 1
            if queued == _CHUNK_EVENTS:
                await self._flush()
                queued = 0
        if queued:
            await self._flush()
        lost = self.client.stats.dropped - dropped
        if lost:
            raise FollowerError(
                f"{lost} event(s) read from {str(path)!r} after line {position.line_number} were dropped "
                "by the client (buffer full, no spool); the checkpoint stays there and a restart re-sends "
                "them: raise ClientConfig.max_buffered_bytes or set ClientConfig.spool_dir"
            )
        refused = self.client.stats.rejected - rejected
        if refused:
            error = self.client.stats.last_error
            raise FollowerError(
                f"the sidecar refused {refused} event(s) read from {str(path)!r} after line "
                f"{position.line_number} ({error}); the checkpoint stays there: {_refusal_hint(error)}, "
                "then rerun"
            )

    async def _flush(self) -> None:
        """Wait for every queued event to be acknowledged; report an unreachable sidecar at once,
        and give up after ``give_up_s`` of it."""
        loop = asyncio.get_running_loop()
        while not await self.client.flush(0.5):
            stats = self.client.stats
            self._unreachable(loop.time(), stats.last_error, down=not stats.connected)
        self.unreachable_since = None

    def _unreachable(self, now: float, error: str | None, *, down: bool) -> None:
        if not down:
            self.unreachable_since = None
            return
        if self.unreachable_since is None:
            self.unreachable_since = now
            _log.warning(
                "sidecar %s not answering (%s); retrying with backoff%s",
                self.sidecar_url,
                error,
                "" if self.give_up_s is None else f", giving up after {self.give_up_s:g} s",
            )
        if self.give_up_s is not None and now - self.unreachable_since >= self.give_up_s:
            raise FollowerError(
                f"sidecar {self.sidecar_url} unreachable for {now - self.unreachable_since:.0f} s "
                f"(last error: {error}); the checkpoint stays where the sidecar last acknowledged: "
                "start the sidecar (or fix --sidecar) and rerun"
            )

    async def _post_raw(self, event: dict[str, Any], path: Path) -> None:
        """``event``'s line as the raw body of ``/lines``, retried until acknowledged or refused."""
        params = {key: str(value) for key, value in event.items() if key not in (_RAW, "kind")}
        headers = {"Content-Type": "application/x-ndjson"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        url = f"{self.sidecar_url}/v1/runs/{self.run_id}/lines"
        loop = asyncio.get_running_loop()
        attempt = 0
        async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=5.0)) as http:
            while True:
                error: str
                try:
                    response = await http.post(url, params=params, content=event[_RAW], headers=headers)
                except httpx.HTTPError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                else:
                    if response.status_code == 200:
                        self.unreachable_since = None
                        return
                    error = f"HTTP {response.status_code}: {response.text[:300]}"
                    if response.status_code < 500 and response.status_code not in (408, 425, 429):
                        raise FollowerError(
                            f"the sidecar refused line {event['line_number']} of {str(path)!r} "
                            f"({len(event[_RAW])} bytes; {error}); the checkpoint stays before it: "
                            f"{_refusal_hint(error)}, then rerun"
                        )
                self._unreachable(loop.time(), error, down=True)
                await asyncio.sleep(min(5.0, 0.1 * 2**attempt))
                attempt += 1

    async def _commit(self) -> None:
        """Wait for the sidecar to acknowledge everything queued, then checkpoint (never past a
        refusal: ``run_started`` or ``run_ended`` refused stops the follower as a line would)."""
        rejected = self.client.stats.rejected
        await self._flush()
        if self.client.stats.rejected > rejected:
            error = self.client.stats.last_error
            raise FollowerError(
                f"the sidecar refused the run's start or end ({error}); nothing was checkpointed: "
                f"{_refusal_hint(error)}, then rerun"
            )
        await asyncio.to_thread(self._save_state)

    def _events_of(self, name: str, read: TailRead, final: bool) -> tuple[list[dict[str, Any]], bytes]:
        """The events of one read of file ``name``, and the unterminated last line sent with them
        (only when ``final``: the run is over, as the batch check would read the file now)."""
        events = []
        for number, line in read.lines:
            if is_blank_line(line):
                continue
            event = self._completion(number, line) if name == "rollouts" else self._failure(line)
            if event is not None:
                events.append(event)
        partial = b""
        if final and read.at_end and not read.lines and not is_blank_line(read.partial):
            number = read.position.line_number + 1
            event = (
                self._completion(number, read.partial) if name == "rollouts" else self._failure(read.partial)
            )
            if event is not None:
                events.append(event)
                partial = read.partial
        return events, partial

    async def _advance(self, name: str, before: FilePosition, after: FilePosition) -> None:
        """Checkpoint file ``name`` at ``after`` once its events were acknowledged; the sent range
        is dropped once the checkpoint passed it."""
        changed = after != before
        self.positions[name] = after
        pending = self.sent.get(name)
        if pending is not None and pending.end <= after.offset:
            del self.sent[name]
            changed = True
        if changed:
            await asyncio.to_thread(self._save_state)

    async def step(self, *, final: bool = False) -> int:
        """One poll of both files; returns the number of events delivered (and checkpointed).

        ``final`` also sends an unterminated last line (the run is over, as the batch check
        would read the file now).
        """
        if not self.started:
            if not final and not (self.paths.rollouts.exists() or self.paths.failures.exists()):
                return 0  # NeMo Gym writes the materialized inputs first: wait for the plan
            self._start()
            self.started = True
            await self._commit()
        sent = 0
        for name in ("rollouts", "failures"):
            path = self.paths.rollouts if name == "rollouts" else self.paths.failures
            while True:
                position = self.positions[name]
                read: TailRead = await asyncio.to_thread(
                    read_new_lines, str(path), position, max_bytes=self.read_bytes, sent=self.sent.get(name)
                )
                if read.restarted:
                    await self._restart()
                    return sent + await self.step(final=final)
                events, partial = self._events_of(name, read, final)
                if events:  # recorded before the sidecar sees any of them
                    self.sent[name] = SentRange.of(position.offset, (line for _, line in read.lines), partial)
                    await asyncio.to_thread(self._save_state)
                await self._deliver(events, path, position)
                await self._advance(name, position, read.position)
                sent += len(events)
                self.lines_sent += len(events) if name == "rollouts" else 0
                if not read.lines:
                    break
        return sent

    async def end_run(self) -> None:
        """Send what is left (an unterminated last line included) and ``run_ended``."""
        await self.step(final=True)
        self.client.submit_event(run_ended_event(self.generation))
        await self._commit()

    async def run(self, stop: asyncio.Event | None = None, *, idle_exit_s: float | None = None) -> None:
        """Follow until ``stop`` is set (positions checkpointed, the run left open) or, with
        ``idle_exit_s``, until no file grew for that long (then the run is ended).

        ``stop`` also interrupts a poll that waits for an unreachable sidecar: what it had not
        checkpointed is simply read again by the next follower.
        """
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        last_growth = loop.time()
        await self.client.open()
        stopped = asyncio.ensure_future(stop.wait())
        try:
            while not stop.is_set():
                poll = asyncio.ensure_future(self.step())
                await asyncio.wait({poll, stopped}, return_when=asyncio.FIRST_COMPLETED)
                if not poll.done():
                    poll.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await poll
                    break
                if poll.result():
                    last_growth = loop.time()
                elif idle_exit_s is not None and loop.time() - last_growth >= idle_exit_s:
                    await self.end_run()
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(stopped), self.poll_interval_s)
        finally:
            stopped.cancel()
            await self.client.aclose(1.0)


async def run_follower(
    run_dir: str | os.PathLike[str],
    sidecar_url: str,
    *,
    stop: asyncio.Event | None = None,
    **options: Any,
) -> None:
    """Follow ``run_dir`` into the sidecar at ``sidecar_url`` until ``stop`` is set.

    The hook for ``serve --follow RUN_DIR``: start it as a task on the service's loop once the
    server listens, and set ``stop`` on shutdown. ``options`` are :class:`Follower`'s.
    """
    await Follower(run_dir, sidecar_url=sidecar_url, **options).run(stop)


class FollowerThread:
    """A :class:`Follower` on its own thread and loop, beside a server (``serve --follow``).

    Until the server listens, its requests fail and are retried with backoff, so it can be
    started before the server binds. A transient error (an ``OSError`` such as a
    ``PermissionError`` on a followed file) restarts the follower from its checkpoint after a
    backoff, as a restarted process would; a :class:`FollowerError` (a refused line) stops it
    until an operator acts. :meth:`status` says which, for ``/readyz`` and ``/metrics``.
    :meth:`stop` leaves the run open (positions checkpointed).
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        sidecar_url: str,
        *,
        retry_max_s: float = 30.0,
        **options: Any,
    ) -> None:
        self._run_dir, self._url, self._options = run_dir, sidecar_url, options
        self.follower = Follower(run_dir, sidecar_url=sidecar_url, **options)
        self.retry_max_s = retry_max_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="sidecar-follower", daemon=True)
        self.error: BaseException | None = None
        self.state = FollowerState.STARTING
        self.last_error: str | None = None
        self.retries = 0

    def status(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "last_error": self.last_error,
            "retries": self.retries,
            "lines_sent": self.follower.lines_sent,
        }

    async def _follow(self, stop: asyncio.Event) -> None:
        delay = 0.5
        while not stop.is_set():
            self.state = FollowerState.FOLLOWING
            try:
                await self.follower.run(stop)
                return
            except FollowerError as exc:
                self.state, self.last_error = FollowerState.STOPPED, str(exc)
                _log.error("follower stopped: %s", exc)
                return
            except OSError as exc:
                self.state, self.last_error = FollowerState.RETRYING, f"{type(exc).__name__}: {exc}"
                self.retries += 1
                _log.warning("follower error, restarting from its checkpoint in %.1f s: %s", delay, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(self.retry_max_s, delay * 2)
            try:
                self.follower = Follower(self._run_dir, sidecar_url=self._url, **self._options)
            except (OSError, ValueError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"

    def _main(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await self._follow(self._stop)

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by stop()
            self.error = exc
            self.state, self.last_error = FollowerState.STOPPED, f"{type(exc).__name__}: {exc}"
            _log.exception("follower thread failed")
        finally:
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10.0)

    def stop(self, timeout: float = 10.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(timeout)
