"""Service configuration: one frozen dataclass whose fields carry their ``serve`` flag, range and
help (:func:`_option`); the token is a :class:`Secret` whose ``repr`` hides it."""

from __future__ import annotations

import argparse
import ipaddress
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from health.cli_types import Ranged, seconds, size, whole
from sidecar.export.trackers import TrackerSettings
from sidecar.journal import DEFAULT_JOURNAL_PATH
from sidecar.state.inflight import DEFAULT_MAX_TOTAL, InflightRules

__all__ = [
    "READ_TOKEN_ENV_VAR",
    "TOKEN_ENV_VAR",
    "Secret",
    "ServiceSettings",
    "SettingsError",
    "add_options",
    "is_loopback",
    "load_token",
    "options_of",
]

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


def _option(
    default: Any, flag: str | None, kind: Ranged | type, help: str, *, metavar: str | None = None,
    group: str | None = None,
) -> Any:  # fmt: skip
    """A field with its type (a :class:`Ranged` range checked for every value) and, with a ``flag``,
    its ``serve`` option; ``(default ...)`` is appended unless ``help`` names it."""
    meta = {"flag": flag, "kind": kind, "help": help, "metavar": metavar, "group": group}
    return field(default=default, metadata=meta)


_LIMITS = "limits"


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    host: str = _option("127.0.0.1", "--host", str, "bind address")
    port: int = _option(9400, "--port", whole(0, 65535), "port")
    journal_path: Path = _option(  # noqa: RUF009
        DEFAULT_JOURNAL_PATH, "--journal", Path, "SQLite journal path", metavar="FILE"
    )
    token: Secret | None = None
    #: With it, every read but the probes needs this token or ``token`` (``serve --read-token-file``).
    read_token: Secret | None = None
    open_metrics: bool = _option(
        False, "--open-metrics", bool, "with --read-token-file, leave /metrics readable without a token"
    )
    body_cap: int = _option(64 << 20, "--body-cap", size(1024, 16 << 30), "max request body (default 64M)")
    #: orjson's own parse limit, so any row the batch check can read also fits in a request.
    max_json_depth: int = _option(1024, "--max-json-depth", whole(8, 1024), "max JSON nesting of a request")
    #: Minimum seconds between two full health summaries computed for ``/metrics``.
    health_metrics_interval_s: float = _option(2.0, None, seconds(3600, open_low=False), "")
    retain_ended_s: float | None = _option(
        None, "--retain-ended", seconds(1e9, open_low=False),
        "forget runs this long after they ended (default: keep them)", metavar="SECONDS",
    )  # fmt: skip
    #: Straggler and stall rules of in-flight rollouts (``sidecar.state.inflight``).
    inflight: InflightRules = field(default_factory=InflightRules)
    #: OTLP/HTTP base URL metrics are pushed to (``<url>/v1/metrics``); ``None``: no push.
    otlp_endpoint: str | None = None
    otlp_interval_s: float = _option(15.0, None, seconds(86400, low=0.05, open_low=False), "")
    #: MLflow / W&B export (``sidecar.export.trackers``); ``None``: none.
    trackers: TrackerSettings | None = None
    #: The state never reads them back (audits only).
    keep_rows: bool = _option(
        False, "--keep-rows", bool,
        "also journal every raw row, for audits (default: only what each row contributes; the "
        "dispatcher's rollouts.jsonl holds the rows)",
    )  # fmt: skip
    snapshot_every_events: int = _option(
        100_000, "--snapshot-every-events", whole(0, 10**12),
        "snapshot the state after N journaled events (default {default}; 0: not by count)", metavar="N",
    )  # fmt: skip
    snapshot_every_s: float = _option(
        300.0, "--snapshot-every-seconds", seconds(1e9, open_low=False),
        "... or S seconds after the last snapshot (default {default}; 0: not by time)", metavar="S",
    )  # fmt: skip
    snapshot_keep: int = _option(
        2, "--snapshot-keep", whole(1, 100),
        "snapshots kept; journal records older than the oldest are compacted (default {default})",
        metavar="K",
    )  # fmt: skip
    inputs_root: Path | None = _option(  # noqa: RUF009
        None, "--inputs-root", Path,
        "read run_started.materialized_inputs only from files under DIR (default: any path whose name "
        "ends in _materialized_inputs.jsonl)", metavar="DIR", group=_LIMITS,
    )  # fmt: skip
    max_input_line_bytes: int = _option(
        16 << 20, "--max-input-line", size(1024, 4 << 30),
        "longest materialized-inputs line read (default 16M)", metavar="SIZE", group=_LIMITS,
    )  # fmt: skip
    max_plan_tasks: int = _option(
        1_000_000, "--max-plan-tasks", whole(1, 10**9), "tasks per plan", group=_LIMITS
    )
    #: A new run past it is refused with 429 until runs end and are dropped.
    max_runs: int = _option(1_000, "--max-runs", whole(1, 10**6), "runs held at once", group=_LIMITS)
    max_identity_chars: int = _option(
        1024, "--max-identity-chars", whole(1, 1 << 20),
        "longest task / rollout identity, explicit or in a row or line", group=_LIMITS,
    )  # fmt: skip
    max_inflight: int = _option(
        DEFAULT_MAX_TOTAL, "--max-inflight", whole(1, 10**8),
        "in-flight rollouts tracked over all runs; later starts are counted as untracked", metavar="N",
        group=_LIMITS,
    )  # fmt: skip
    #: Past it, 503 + Retry-After; at least the body cap, or a request at the cap could never be taken.
    max_body_bytes_in_flight: int = _option(
        256 << 20, "--max-body-bytes-in-flight", size(1024, 1 << 40),
        "request body bytes held at once over all requests (default 256M)", metavar="SIZE", group=_LIMITS,
    )  # fmt: skip
    header_timeout_s: float = _option(
        10.0, "--header-timeout", seconds(86400),
        "close a connection without complete headers after this long", metavar="SECONDS", group=_LIMITS,
    )  # fmt: skip
    body_timeout_s: float = _option(
        30.0, "--body-timeout", seconds(86400),
        "close a connection whose request body stalls this long", metavar="SECONDS", group=_LIMITS,
    )  # fmt: skip
    #: Its unsent bytes not shrinking: the connection is dropped and those bytes freed.
    write_timeout_s: float = _option(
        60.0, "--write-timeout", seconds(86400),
        "drop a connection whose client reads nothing of a response this long", metavar="SECONDS",
        group=_LIMITS,
    )  # fmt: skip
    max_connections_per_peer: int = _option(
        256, "--max-connections-per-peer", whole(1, 10**6), "open connections per client address",
        group=_LIMITS,
    )  # fmt: skip
    #: ``/report`` keeps them.
    metrics_retain_ended_s: float = _option(
        3600.0, "--metrics-retain-ended", seconds(1e9),
        "ended runs leave /metrics after this long", metavar="SECONDS", group=_LIMITS,
    )  # fmt: skip

    def __post_init__(self) -> None:
        for spec in fields(self):
            kind, value = spec.metadata.get("kind"), getattr(self, spec.name)
            if isinstance(kind, Ranged) and value is not None:
                try:
                    kind(repr(value))
                except argparse.ArgumentTypeError:
                    raise SettingsError(f"{spec.name} must be {kind.describe()}, got {value!r}") from None
        if self.max_body_bytes_in_flight < self.body_cap:
            raise SettingsError(
                f"max_body_bytes_in_flight ({self.max_body_bytes_in_flight}) must be >= the body cap "
                f"({self.body_cap}), or a request at the cap could never be taken"
            )
        if self.inputs_root is not None and not self.inputs_root.is_dir():
            raise SettingsError(f"--inputs-root {str(self.inputs_root)!r} is not a directory")

    def check_bind(self) -> None:
        """Refuse to listen beyond loopback without a token: the ingest API would be open to anyone."""
        if not is_loopback(self.host) and self.token is None:
            raise SettingsError(
                f"refusing to bind non-loopback address {self.host!r} without a bearer token "
                f"(give --token-file or set {TOKEN_ENV_VAR})"
            )


def add_options(parser: argparse.ArgumentParser) -> None:
    """``serve``'s options of the fields that have a flag (``limits`` in their own group)."""
    groups: dict[str | None, Any] = {None: parser, _LIMITS: parser.add_argument_group(_LIMITS)}
    for spec in fields(ServiceSettings):
        meta = spec.metadata
        if not meta.get("flag"):
            continue
        text, default = meta["help"], spec.default
        if meta["kind"] is bool:  # a switch, off unless given
            text = text if "default" in text else f"{text} (default: off)"
            groups[meta["group"]].add_argument(meta["flag"], dest=spec.name, action="store_true", help=text)
            continue
        shown = f"{default:g}" if isinstance(default, float) else default
        text = text.format(default=shown) if "default" in text else f"{text} (default {shown})"
        groups[meta["group"]].add_argument(
            meta["flag"], dest=spec.name, type=meta["kind"], default=default,
            metavar=meta["metavar"], help=text,
        )  # fmt: skip


def options_of(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ServiceSettings`` keywords ``args`` holds (every field :func:`add_options` added)."""
    flagged = (spec.name for spec in fields(ServiceSettings) if spec.metadata.get("flag"))
    return {name: getattr(args, name) for name in flagged}

