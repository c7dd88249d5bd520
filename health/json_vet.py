"""Is a byte string JSON exactly as orjson reads it? Vetted in one pass, before a typed decode.

The fast paths decode lines and request bodies with msgspec, which checks syntax but not all
of what orjson (the full path) refuses: invalid UTF-8 inside strings, lone surrogate escapes,
numbers that overflow to infinity; and orjson reads integers past 64 bits as floats where
msgspec keeps them exact. So a document is vetted first: :func:`vet` is True only if orjson
accepts it with the values msgspec decodes, nested at most ``max_depth`` containers.

The exact contract (what the native vetter answers, byte for byte): ``orjson.loads(data)``
succeeds, every integer literal in ``data`` lies in ``[-2**63, 2**64 - 1]``, and ``data``
nests at most ``max_depth`` containers. Then msgspec decodes the values orjson does. "Every
integer literal" includes one a later duplicate key hides: ``{"a":-9223372036854775809,"a":0}``
is refused although both libraries read ``{"a": 0}``. That refusal is deliberate (a refusal
only sends the document down orjson's full path): accepting it would mean a set of the keys
seen in every object, normalised for escapes, on the hot path, for input no producer writes.

Two vetters, one contract:

* ``native`` (:mod:`health._json_vet`, built from C when a compiler was present at install):
  exactly that acceptance, reading the bytes in place at several GB/s. No well-kept library
  validates with orjson's exact acceptance without building a value or tape first.
* ``simdjson`` (the fallback, also where ``ROLLOUT_SIDECAR_NATIVE=0`` turns the native part
  off, :mod:`health.native`): simdjson's acceptance is a subset of orjson's with the same
  values, except a leading byte-order mark, which it skips and orjson refuses (so a BOM is
  refused here). Its depth limit is checked by wrapping the document in ``1024 - max_depth``
  arrays; it counts a scalar as a level, so a document exactly ``max_depth`` deep with a
  scalar at its deepest level is refused (a refusal is always safe: the caller takes the
  full path). The wrapping also lets a document close it and open another (``1],[2``): the
  fallback accepts several comma-separated values there, so a caller must decode exactly one
  value afterwards (a msgspec decode does).

The native walk can also note where values lie as it passes them, so a caller need not scan
the document again: :func:`vet_event_rows` finds an ingest body's rows (and
:func:`health.payload_spans.decode_strict_if_vetted` a rollout line's payloads).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Literal

from .native import native_allowed

if TYPE_CHECKING:
    import simdjson

__all__ = [
    "MAX_DEPTH",
    "VETTER",
    "EventRows",
    "Vetter",
    "native_vet",
    "simdjson_vet",
    "vet",
    "vet_event_rows",
]

Vetter = Literal["native", "simdjson"]

MAX_DEPTH: Final = 1024
"""orjson's nesting limit: a deeper document is refused whatever ``max_depth`` allows."""

_MAX_SIMDJSON_BYTES: Final = 256 << 20
"""Longer documents are refused by the fallback: a simdjson parser keeps a buffer as large as
its largest input."""
_BOM: Final = b"\xef\xbb\xbf"

_local = threading.local()


def _simdjson_parser() -> simdjson.Parser:
    """simdjson parsers are not thread-safe and keep their buffers: one per thread. Imported
    on first use: where the native vetter is built, a batch run never needs it (~3 ms)."""
    parser: simdjson.Parser | None = getattr(_local, "parser", None)
    if parser is None:
        import simdjson

        parser = _local.parser = simdjson.Parser()
    return parser


def simdjson_vet(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> bool:
    """The fallback vetter (see the module notes); the same contract as :func:`vet`."""
    if max_depth < 0:
        raise ValueError(f"vet() max_depth must be >= 0, got {max_depth}")
    if len(data) > _MAX_SIMDJSON_BYTES or bytes(data[:3]) == _BOM:
        return False
    wrap = MAX_DEPTH - min(max_depth, MAX_DEPTH)
    try:
        _simdjson_parser().parse(b"".join((b"[" * wrap, data, b"]" * wrap)))  # the proxy is dropped at once
    except Exception:  # any refusal (ValueError, RuntimeError, UnicodeDecodeError ...)
        return False
    return True


EventRows = tuple[bytes, list[tuple[int, int]]]
"""An ingest body without its events' rows, and each row's span (see :func:`vet_event_rows`)."""

native_vet: Callable[[bytes | bytearray | memoryview, int], bool] | None
"""The native vetter, or ``None`` where the package was installed without a C compiler (or
``ROLLOUT_SIDECAR_NATIVE=0`` turns it off, :mod:`health.native`)."""
_native_event_rows: Callable[[bytes | bytearray | memoryview, int], EventRows | bool] | None
native_vet = _native_event_rows = None
if native_allowed():  # ROLLOUT_SIDECAR_NATIVE=0 turns it off (health.native)
    try:
        from ._json_vet import vet as native_vet
        from ._json_vet import vet_event_rows as _native_event_rows
    except ImportError:  # see setup.py
        native_vet = _native_event_rows = None

_vet = simdjson_vet if native_vet is None else native_vet
VETTER: Final[Vetter] = "simdjson" if native_vet is None else "native"
"""Which vetter :func:`vet` runs."""


def vet(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> bool:
    """True only if ``orjson.loads(data)`` succeeds with the values msgspec decodes and
    ``data`` nests at most ``max_depth`` containers (``{}`` is 1 deep, a scalar 0).

    The native vetter answers exactly: orjson accepts ``data``, every integer literal in it
    (even one a later duplicate key hides) lies in ``[-2**63, 2**64 - 1]``, and the depth
    holds (module notes).

    The native vetter answers exactly that; the fallback may also refuse a document exactly
    ``max_depth`` deep, and accept ``1],[2`` when ``max_depth < 1024`` (see the module notes).
    ``max_depth`` past 1024 acts as 1024."""
    return _vet(data, max_depth)


def vet_event_rows(data: bytes | bytearray | memoryview, max_depth: int = MAX_DEPTH) -> EventRows | bool:
    """:func:`vet` and, with the native vetter, each event's row in the same pass.

    ``False``: refused (as :func:`vet`). ``True``: vetted, but no spans (the body is not a
    plain array of events or ``{"events": [...]}`` with that one member, a key of the envelope
    or of an event holds a backslash, or the native vetter is not built): decode it whole.
    Else ``(skeleton, spans)``: ``spans[i]`` is the ``(start, end)`` offsets in ``data`` of
    element ``i``'s ``"row"`` value (the last one where the key repeats, as msgspec keeps it;
    ``(-1, -1)`` without one), and ``skeleton`` is ``data`` with each ``"row"`` value of an
    event replaced by ``0``."""
    if _native_event_rows is None:
        return vet(data, max_depth)
    return _native_event_rows(data, max_depth)
