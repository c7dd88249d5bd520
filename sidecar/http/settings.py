"""Service configuration: where to listen, where the journal lives, how requests are bounded.

Kept as one frozen dataclass so the CLI, the server runner and tests build it the same way.
The bearer token is held as a :class:`Secret` whose ``repr`` never shows the value, so a
settings object can be logged safely.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from sidecar.export.trackers._settings import TrackerSettings
from sidecar.state.inflight import DEFAULT_MAX_TOTAL, InflightRules

__all__ = [
    "DEFAULT_BODY_CAP",
    "DEFAULT_JOURNAL_PATH",
    "DEFAULT_MAX_JSON_DEPTH",
    "READ_TOKEN_ENV_VAR",
    "TOKEN_ENV_VAR",
    "Secret",
    "ServiceSettings",
    "SettingsError",
    "is_loopback",
    "load_token",
]

DEFAULT_JOURNAL_PATH = Path("sidecar-state") / "journal.sqlite3"
#: Large result rows (long multi-turn trajectories) must fit; 64 MiB covers them with room.
DEFAULT_BODY_CAP = 64 * 1024 * 1024
#: orjson's own parse limit, so any row the batch check can read (minus the few levels of the
#: request envelope) also fits in a request and is reported as the batch check reports it.
DEFAULT_MAX_JSON_DEPTH = 1024
TOKEN_ENV_VAR = "ROLLOUT_SIDECAR_TOKEN"
#: Where ``serve`` reads the read token from when ``--read-token-file`` is not given.
READ_TOKEN_ENV_VAR = "ROLLOUT_SIDECAR_READ_TOKEN"


class SettingsError(ValueError):
    """A configuration value is unusable; the message names it and where it came from."""


class Secret:
    """A string that never prints itself."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals; anything else may be reachable from outside."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_token(
    token_file: Path | None, env: dict[str, str] | None = None, *, variable: str = TOKEN_ENV_VAR
) -> Secret | None:
    """Read a bearer token from ``token_file`` (first line, stripped) or ``$variable``."""
    environ = os.environ if env is None else env
    if token_file is not None:
        try:
            text = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise SettingsError(f"cannot read token file {str(token_file)!r}: {exc.strerror}") from exc
        if not text:
            raise SettingsError(f"token file {str(token_file)!r} is empty")
        return Secret(text.splitlines()[0].strip())
    value = environ.get(variable, "").strip()
    return Secret(value) if value else None


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    host: str = "127.0.0.1"
    port: int = 9400
    journal_path: Path = DEFAULT_JOURNAL_PATH
    token: Secret | None = None
    #: With it, every read but the probes needs this token or ``token`` (``serve --read-token-file``).
    read_token: Secret | None = None
    #: ``/metrics`` stays readable without a token even with ``read_token`` (``serve --open-metrics``).
    open_metrics: bool = False
    body_cap: int = DEFAULT_BODY_CAP
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH
    #: Minimum seconds between two full health summaries computed for ``/metrics``.
    health_metrics_interval_s: float = 2.0
    #: Forget runs this many seconds after they ended (memory and metric series); ``None``: keep.
    retain_ended_s: float | None = None
    #: Straggler and stall rules of in-flight rollouts (``sidecar.state.inflight``).
    inflight: InflightRules = field(default_factory=InflightRules)
    #: OTLP/HTTP base URL metrics are pushed to (``<url>/v1/metrics``); ``None``: no push.
    otlp_endpoint: str | None = None
    #: Seconds between two OTLP pushes.
    otlp_interval_s: float = 15.0
    #: MLflow / W&B export (``sidecar.export.trackers``); ``None``: none.
    trackers: TrackerSettings | None = None
    #: Only read ``materialized_inputs`` files under this directory (``None``: any such file name).
    inputs_root: Path | None = None
    #: Longest line of a materialized-inputs file the service reads.
    max_input_line_bytes: int = 16 << 20
    #: Most tasks one plan may declare (given or derived from materialized inputs).
    max_plan_tasks: int = 1_000_000
    #: Most runs held at once; a new run past it is refused with 429 until runs end and are dropped.
    max_runs: int = 1_000
    #: Longest task / rollout identity (characters of its text) an event may give, explicitly or
    #: in its row or line.
    max_identity_chars: int = 1024
    #: In-flight rollouts tracked over all runs; ``started`` events past it are counted as
    #: untracked, as past a run's own cap.
    max_inflight: int = DEFAULT_MAX_TOTAL
    #: Request body bytes the service holds at once over all requests; past it, 503 + Retry-After.
    max_body_bytes_in_flight: int = 256 << 20
    #: Seconds a connection may take to send its complete request headers before it is closed.
    header_timeout_s: float = 10.0
    #: Seconds a request body may go without a byte arriving before the connection is closed.
    body_timeout_s: float = 30.0
    #: Seconds a response may go without the client reading any of it (its unsent bytes not
    #: shrinking) before the connection is dropped and those bytes freed.
    write_timeout_s: float = 60.0
    #: Open connections one peer address may hold; more are closed at once.
    max_connections_per_peer: int = 256
    #: Ended runs leave ``/metrics`` this many seconds after they ended (``/report`` keeps them).
    metrics_retain_ended_s: float = 3600.0
    #: Also journal each event's raw row (audits); the state never reads it back.
    keep_rows: bool = False
    #: Snapshot the runs' state after this many journaled events (0: never by count).
    snapshot_every_events: int = 100_000
    #: ... or this many seconds after the previous snapshot if events arrived since (0: never by time).
    snapshot_every_s: float = 300.0
    #: Snapshots kept; the journal's records older than the oldest kept one are compacted.
    snapshot_keep: int = 2

    def __post_init__(self) -> None:
        self._check_service_ranges()
        self._check_request_caps()

    def _check_service_ranges(self) -> None:
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"port must be in 0..65535, got {self.port!r}")
        if self.body_cap < 1024:
            raise SettingsError(f"body cap must be at least 1024 bytes, got {self.body_cap!r}")
        if self.retain_ended_s is not None and not self.retain_ended_s >= 0:
            raise SettingsError(f"retain_ended_s must be >= 0, got {self.retain_ended_s!r}")
        if not 0.05 <= self.otlp_interval_s <= 86400:
            raise SettingsError(
                f"OTLP export interval must be in 0.05..86400 s, got {self.otlp_interval_s!r}"
            )
        if not 0 <= self.snapshot_every_events <= 10**12:
            raise SettingsError(
                f"snapshot_every_events must be in 0..1e12, got {self.snapshot_every_events!r}"
            )
        if not 0 <= self.snapshot_every_s <= 10**9:
            raise SettingsError(f"snapshot_every_s must be in 0..1e9, got {self.snapshot_every_s!r}")
        if not 1 <= self.snapshot_keep <= 100:
            raise SettingsError(f"snapshot_keep must be in 1..100, got {self.snapshot_keep!r}")

    def _check_request_caps(self) -> None:
        if not 8 <= self.max_json_depth <= 1024:
            raise SettingsError(f"max JSON depth must be in 8..1024, got {self.max_json_depth!r}")
        for name in (
            "max_input_line_bytes",
            "max_plan_tasks",
            "max_runs",
            "max_identity_chars",
            "max_inflight",
            "max_connections_per_peer",
        ):
            if getattr(self, name) < 1:
                raise SettingsError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.max_body_bytes_in_flight < self.body_cap:
            raise SettingsError(
                f"max_body_bytes_in_flight ({self.max_body_bytes_in_flight}) must be >= the body cap "
                f"({self.body_cap}), or a request at the cap could never be taken"
            )
        for name in ("header_timeout_s", "body_timeout_s", "write_timeout_s", "metrics_retain_ended_s"):
            value = getattr(self, name)
            if not (value > 0 and value < float("inf")):
                raise SettingsError(f"{name} must be a finite number of seconds > 0, got {value!r}")

    def check_bind(self) -> None:
        """Refuse to listen beyond loopback without a token: the ingest API would be open to anyone."""
        if not is_loopback(self.host) and self.token is None:
            raise SettingsError(
                f"refusing to bind non-loopback address {self.host!r} without a bearer token "
                f"(give --token-file or set {TOKEN_ENV_VAR})"
            )
