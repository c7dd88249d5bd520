"""The follower: an unmodified NeMo Gym run directory into sidecar events, exactly once.

A checkpoint (positions, generation, the range sent past them) keeps it exact across restarts,
truncations, crashes and outages; a line over ``max_line_bytes`` goes as an unreadable line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from sidecar.wire import EventKind, MaterializedInputsError, materialized_lines, plan_from_lines

from .client import SidecarClient, run_ended_event
from .config import ClientConfig
from .tail import FilePosition, SentRange, TailRead, is_blank_line, read_new_lines

__all__ = ["FollowPaths", "Follower", "FollowerError", "follow_paths"]

_log = logging.getLogger("dispatcher_client.follow")
_CHUNK_EVENTS = 256
#: The sidecar's ``latency_ms`` range: a latency outside it is not sent (the event would be refused).
_MAX_LATENCY_MS = 1e10
_RAW = "_raw_line"


def _refusal_hint(error: str | None) -> str:
    if (error or "").startswith(("HTTP 401", "HTTP 403")):
        return "check the bearer token (--token-file or $ROLLOUT_SIDECAR_TOKEN)"
    return "fix the cause the sidecar names"


class FollowerError(RuntimeError):
    """The follower cannot go on without losing lines; its checkpoint is left where it was."""


@dataclass(frozen=True, slots=True)
class FollowPaths:
    """The files of one run directory, named as NeMo Gym names them."""

    rollouts: Path
    failures: Path
    materialized: Path
    source_path: str
    """The rollouts path as ``health_check_run_dir(run_dir, rollout_file)`` spells it in locators."""


def follow_paths(run_dir: str | os.PathLike[str], rollouts_file: str | os.PathLike[str] | None = None
                 ) -> FollowPaths:
    selected = Path(rollouts_file) if rollouts_file is not None else Path("rollouts.jsonl")
    rollouts = selected if selected.is_absolute() else Path(run_dir) / selected
    stem = rollouts.stem if rollouts.suffix else rollouts.name
    return FollowPaths(rollouts, rollouts.with_name(f"{stem}_failures.jsonl"),
                       rollouts.with_name(f"{stem}_materialized_inputs.jsonl"), str(rollouts))


def _plan(path: Path) -> dict[str, int] | None:
    """Repeats per task over the materialized inputs (``None`` if absent), read as the sidecar reads them."""
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


def _row_latency_ms(line: bytes, parse_bytes: int) -> int | float | None:
    """The row's ``ng_perf.total_latency_ms``; a row over ``parse_bytes`` is not parsed whole."""
    try:
        if len(line) <= parse_bytes:
            row = orjson.loads(line)
            perf = row.get("ng_perf") if isinstance(row, dict) else None
        else:
            start = line.find(b"{", line.rfind(b'"ng_perf"'))
            perf = orjson.loads(line[start : line.find(b"}", start) + 1]) if start >= 0 else None
    except orjson.JSONDecodeError:
        return None
    latency = perf.get("total_latency_ms") if isinstance(perf, dict) else None
    if isinstance(latency, int | float) and not isinstance(latency, bool) and 0 < latency <= _MAX_LATENCY_MS:
        return latency
    return None


class Follower:
    """Follows one run directory into one sidecar run (``await Follower(...).run()``).

    Lines over ``raw_line_bytes`` go as raw bodies to ``/lines``: JSON escaping could double them.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, sidecar_url: str, run_id: str | None = None,
                 rollouts_file: str | os.PathLike[str] | None = None, token: str | None = None,
                 poll_interval_s: float = 0.2,
                 latency_from_rows: bool = True, ignored_checks: Iterable[str] = (),
                 client_config: ClientConfig | None = None, read_bytes: int = 8 << 20,
                 max_line_bytes: int = 64 << 20, raw_line_bytes: int = 1 << 20,
                 give_up_s: float | None = None) -> None:
        self.paths = follow_paths(run_dir, rollouts_file)
        self.run_id = run_id or Path(os.path.abspath(run_dir)).name
        self.state_path = Path(run_dir) / f".rollout_sidecar_follow.{self.run_id}.json"
        self.poll_interval_s = poll_interval_s
        self.latency_from_rows = latency_from_rows
        self.ignored_checks = list(dict.fromkeys(check.strip() for check in ignored_checks if check.strip()))
        self.client = SidecarClient(sidecar_url, run_id=self.run_id, token=token, config=client_config)
        self.read_bytes, self.max_line_bytes, self.raw_line_bytes = read_bytes, max_line_bytes, raw_line_bytes
        self.give_up_s = give_up_s
        self.unreachable_since: float | None = None
        self.generation = 0
        self.positions = {"rollouts": FilePosition(), "failures": FilePosition()}
        #: Per file, bytes past the checkpoint sent to the sidecar (it may hold their lines).
        self.sent: dict[str, SentRange] = {}
        self.started = False
        self.lines_sent = self.lines_skipped = self.restarts = 0
        self._load_state()

    def _load_state(self) -> None:
        try:
            body = orjson.loads(self.state_path.read_bytes())
        except FileNotFoundError:  # nothing known of what was sent: supersede what the sidecar holds
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
        body = {"run_id": self.run_id, "source_path": self.paths.source_path, "generation": self.generation,
                "started": self.started, "sent": {name: sent.as_json() for name, sent in self.sent.items()},
                "files": {name: position.as_json() for name, position in self.positions.items()}}
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        with open(tmp, "wb") as handle:
            handle.write(orjson.dumps(body))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.state_path)

    def _gen(self, event: dict[str, Any]) -> dict[str, Any]:
        return {**event, "generation": self.generation} if self.generation else event

    def _start(self) -> None:
        event = {"kind": EventKind.RUN_STARTED.value, "source_path": self.paths.source_path,
                 "plan": _plan(self.paths.materialized), "ignored_checks": self.ignored_checks or None}
        self.client.submit_event(self._gen({key: value for key, value in event.items() if value is not None}))

    def _completion(self, number: int, line: bytes) -> dict[str, Any]:
        event: dict[str, Any] = {"kind": EventKind.COMPLETED.value, "line_number": number}
        if len(line) > self.raw_line_bytes:
            event[_RAW] = line
        else:
            event["line"] = _text(line)
        latency_ms = _row_latency_ms(line, self.raw_line_bytes)
        if latency_ms is not None:
            event["latency_ms"] = latency_ms  # the sidecar's ng_perf keeps the row's latency
            if self.latency_from_rows:
                event["seconds"] = latency_ms / 1000.0
        return self._gen(event)

    def _skipped(self, path: Path, number: int, size: int) -> dict[str, Any]:
        """Line ``number``, too long to send, as the unreadable line the batch check would count."""
        self.lines_skipped += 1
        _log.warning("%s: line %d of %d bytes is over the %d-byte cap: skipped (reported record_unreadable)",
                     path, number, size, self.max_line_bytes)
        text = f"rollout-sidecar follow: line {number} of {size} bytes, over the cap, not read"
        line = orjson.dumps(text).decode()
        return self._gen({"kind": EventKind.COMPLETED.value, "line_number": number, "line": line})

    def _failure(self, line: bytes) -> dict[str, Any] | None:
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        return self._gen({"kind": EventKind.FAILED.value, "row": row}) if isinstance(row, dict) else None

    async def _restart(self) -> None:
        """A file was replaced or truncated: new generation (from the clock when larger, so a follower
        killed between the sidecar's reset and its checkpoint resets it again), every file from 0."""
        self.generation = max(self.generation + 1, time.time_ns() // 1_000_000)
        self.restarts += 1
        self.positions = {name: FilePosition() for name in self.positions}
        self.sent = {}  # of a superseded generation: the sidecar drops it
        _log.info("followed file replaced or truncated: generation %d", self.generation)
        self._start()
        self.started = True
        await self._commit()

    async def _deliver(self, events: list[dict[str, Any]], path: Path, position: FilePosition) -> None:
        """Send ``events`` in acknowledged chunks, in file order; one dropped or refused stops the
        follower with the checkpoint before it (a rerun re-sends the acknowledged ones as duplicates)."""
        stats = self.client.stats
        dropped, rejected = stats.dropped, stats.rejected
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
        if stats.dropped > dropped:
            raise FollowerError(
                f"{stats.dropped - dropped} event(s) read from {str(path)!r} after line "
                f"{position.line_number} were dropped by the client (buffer full, no spool); the checkpoint "
                "stays there and a restart re-sends them: raise ClientConfig.max_buffered_bytes or set "
                "ClientConfig.spool_dir"
            )
        if stats.rejected > rejected:
            raise FollowerError(
                f"the sidecar refused {stats.rejected - rejected} event(s) read from {str(path)!r} after "
                f"line {position.line_number} ({stats.last_error}); the checkpoint stays there: "
                f"{_refusal_hint(stats.last_error)}, then rerun"
            )

    async def _flush(self) -> None:
        """Wait for every queued event to be acknowledged; give up after ``give_up_s`` unreachable."""
        loop = asyncio.get_running_loop()
        while not await self.client.flush(0.5):
            stats = self.client.stats
            self._unreachable(loop.time(), stats.last_error, down=not stats.connected)
        self.unreachable_since = None

    def _unreachable(self, now: float, error: str | None, *, down: bool) -> None:
        url = self.client.base_url
        if not down:
            self.unreachable_since = None
        elif self.unreachable_since is None:
            self.unreachable_since = now
            giving_up = "" if self.give_up_s is None else f", giving up after {self.give_up_s:g} s"
            _log.warning("sidecar %s not answering (%s); retrying with backoff%s", url, error, giving_up)
        if down and self.give_up_s is not None and now - (self.unreachable_since or now) >= self.give_up_s:
            raise FollowerError(
                f"sidecar {url} unreachable for {now - (self.unreachable_since or now):.0f} s "
                f"(last error: {error}); the checkpoint stays where the sidecar last acknowledged: "
                "start the sidecar (or fix --sidecar) and rerun"
            )

    async def _post_raw(self, event: dict[str, Any], path: Path) -> None:
        """``event``'s line as the raw body of ``/lines``, retried until acknowledged (413: skipped)."""
        params = {key: str(value) for key, value in event.items() if key not in (_RAW, "kind")}
        headers = {**self.client.auth_headers, "Content-Type": "application/x-ndjson"}
        line, number, attempt = event[_RAW], event["line_number"], 0
        while True:
            try:
                response = await self.client.http.post(f"/v1/runs/{self.run_id}/lines", params=params,
                                                       content=line, headers=headers, timeout=60.0)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                status = response.status_code
                if status == 200:
                    self.unreachable_since = None
                    return
                error = f"HTTP {status}: {response.text[:300]}"
                if status == 413:  # the sidecar's cap is lower than ours: learn it
                    self.max_line_bytes = min(self.max_line_bytes, len(line) - 1)
                    skipped = self._skipped(path, number, len(line))
                    return await self._deliver([skipped], path, FilePosition(line_number=number - 1))
                if status < 500 and status not in (408, 425, 429):
                    raise FollowerError(
                        f"the sidecar refused line {number} of {str(path)!r} ({len(line)} bytes; {error}); "
                        f"the checkpoint stays before it: {_refusal_hint(error)}, then rerun"
                    )
            self._unreachable(asyncio.get_running_loop().time(), error, down=True)
            await asyncio.sleep(min(5.0, 0.1 * 2**attempt))
            attempt += 1

    async def _commit(self) -> None:
        """Wait for everything queued to be acknowledged, then checkpoint (never past a refused
        ``run_started`` or ``run_ended``: that stops the follower as a refused line would)."""
        rejected = self.client.stats.rejected
        await self._flush()
        if self.client.stats.rejected > rejected:
            error = self.client.stats.last_error
            raise FollowerError(f"the sidecar refused the run's start or end ({error}); nothing was "
                                f"checkpointed: {_refusal_hint(error)}, then rerun")
        await asyncio.to_thread(self._save_state)

    def _events_of(self, name: str, path: Path, read: TailRead, final: bool
                   ) -> tuple[list[dict[str, Any]], SentRange | None]:
        """The events of one read of file ``name`` and the range they cover; an unterminated last
        line only when ``final`` (the run is over, as the batch check would read the file now)."""
        oversize = read.oversize
        if oversize is not None:
            if not (oversize.sent.terminated or final):
                return [], None
            event = self._skipped(path, oversize.line_number, oversize.size) if name == "rollouts" else None
            return ([event] if event else []), oversize.sent
        events = []
        for number, line in read.lines:
            event = None if is_blank_line(line) else self._event(name, number, line)
            if event is not None:
                events.append(event)
        partial = b""
        if final and read.at_end and not read.lines and not is_blank_line(read.partial):
            event = self._event(name, read.position.line_number + 1, read.partial)
            if event is not None:
                events.append(event)
                partial = read.partial
        if not events:
            return events, None
        return events, SentRange.of(self.positions[name].offset, [line for _, line in read.lines], partial)

    def _event(self, name: str, number: int, line: bytes) -> dict[str, Any] | None:
        return self._completion(number, line) if name == "rollouts" else self._failure(line)

    async def step(self, *, final: bool = False) -> int:
        """One poll of both files: the events delivered (``final``: an unterminated last line too)."""
        if not self.started:
            if not final and not (self.paths.rollouts.exists() or self.paths.failures.exists()):
                return 0  # NeMo Gym writes the materialized inputs first: wait for the plan
            self._start()
            self.started = True
            await self._commit()
        sent = 0
        for name, path in (("rollouts", self.paths.rollouts), ("failures", self.paths.failures)):
            while True:
                position = self.positions[name]
                read: TailRead = await asyncio.to_thread(
                    read_new_lines, str(path), position, max_bytes=self.read_bytes,
                    max_line_bytes=self.max_line_bytes, sent=self.sent.get(name),
                )
                if read.restarted:
                    await self._restart()
                    return sent + await self.step(final=final)
                events, sent_range = self._events_of(name, path, read, final)
                if sent_range is not None:  # recorded before the sidecar sees any of them
                    self.sent[name] = sent_range
                    await asyncio.to_thread(self._save_state)
                await self._deliver(events, path, position)
                await self._advance(name, position, read.position)
                sent += len(events)
                self.lines_sent += len(events) if name == "rollouts" else 0
                if not read.lines and (read.oversize is None or read.at_end):
                    break
        return sent

    async def _advance(self, name: str, before: FilePosition, after: FilePosition) -> None:
        """Checkpoint file ``name`` at ``after``; drop the sent range once the checkpoint passed it."""
        changed = after != before
        self.positions[name] = after
        pending = self.sent.get(name)
        if pending is not None and pending.end <= after.offset:
            del self.sent[name]
            changed = True
        if changed:
            await asyncio.to_thread(self._save_state)

    async def end_run(self) -> None:
        """Send what is left (an unterminated last line included) and ``run_ended``."""
        await self.step(final=True)
        self.client.submit_event(run_ended_event(self.generation))
        await self._commit()

    async def run(self, stop: asyncio.Event | None = None, *, idle_exit_s: float | None = None) -> None:
        """Follow until ``stop`` is set (the run left open) or no file grew for ``idle_exit_s``
        (the run ended); ``stop`` also interrupts a poll waiting for an unreachable sidecar."""
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
                    async with asyncio.timeout(self.poll_interval_s):
                        await asyncio.shield(stopped)
        finally:
            stopped.cancel()
            await self.client.aclose(1.0)
