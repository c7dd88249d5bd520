"""Argument types with a range, shared by every ``rollout-sidecar`` subcommand: a value out of
range is refused by argparse in one line naming the flag, and each type carries its range so
tests can try the values just past it. In ``health``, the package every other one may import.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = ["Ranged", "number", "seconds", "sidecar_url", "size", "whole"]

_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def _parse_size(text: str) -> int:
    """``64M``, ``1g``, ``512KiB`` or plain bytes (binary units)."""
    cleaned = text.strip().lower().removesuffix("ib").removesuffix("b")
    factor = _UNITS.get(cleaned[-1:], 1)
    number = cleaned[:-1] if cleaned[-1:] in _UNITS else cleaned
    try:
        value = float(number) * factor
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64M, 1048576)") from exc
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 64M, 1048576)")
    return int(value)


def _bytes(value: float) -> str:
    """``1024`` -> ``1K``: a size as the flag takes it."""
    for suffix, factor in (("T", 1024**4), ("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if value >= factor and value % factor == 0:
            return f"{int(value // factor)}{suffix}"
    return str(int(value))


@dataclass(frozen=True, slots=True)
class Ranged:
    """An argparse ``type=``: parses with ``kind`` and refuses values outside ``low..high``.

    ``open_low`` excludes ``low`` itself (``> 0`` rather than ``>= 0``); ``unit`` only shapes
    the message. NaN and infinities are never in range.
    """

    kind: str  # "int" | "float" | "size"
    low: float
    high: float
    open_low: bool = False
    unit: str = ""

    def __call__(self, text: str) -> int | float:
        value: int | float
        if self.kind == "size":
            value = _parse_size(text)
        else:
            try:
                value = int(text) if self.kind == "int" else float(text)
            except ValueError as exc:
                what = "an integer" if self.kind == "int" else "a number"
                raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from exc
        below = value <= self.low if self.open_low else value < self.low
        if not math.isfinite(value) or below or value > self.high:
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {text!r}")
        return value

    def describe(self) -> str:
        """The range in words, as the refusal and the docs give it."""
        if self.kind == "size":
            low, high = _bytes(self.low), _bytes(self.high)
        elif self.kind == "int":
            low, high = str(int(self.low)), str(int(self.high))
        else:
            low, high = f"{self.low:g}", f"{self.high:g}"
        if self.open_low:
            return f"> {low} and <= {high}{self.unit}"
        return f"in {low}..{high}{self.unit}"


def whole(low: int, high: int) -> Ranged:
    """An integer in ``low..high``."""
    return Ranged("int", low, high)


def number(high: float, *, low: float = 0.0, open_low: bool = True) -> Ranged:
    """A finite number ``> low`` (or ``>= low`` with ``open_low=False``) and ``<= high``."""
    return Ranged("float", low, high, open_low=open_low)


def seconds(high: float, *, low: float = 0.0, open_low: bool = True) -> Ranged:
    """A finite number of seconds, ``> low`` (or ``>= low`` with ``open_low=False``) and ``<= high``."""
    return Ranged("float", low, high, open_low=open_low, unit=" s")


def size(low: int, high: int) -> Ranged:
    """A byte size (``64M``, ``1G``, ``1048576``) in ``low..high``."""
    return Ranged("size", low, high, unit="")


def sidecar_url(text: str) -> str:
    """``--sidecar``: an ``http(s)://host[:port]`` base URL, refused at once otherwise.

    Without a scheme httpx could never connect, and the fail-open client would retry the
    "unreachable" sidecar until it gave up; refusing here names the fix instead.
    """
    value = text.strip()
    parts = urlsplit(value)
    if parts.scheme.lower() not in ("http", "https"):
        hint = value.split("://", 1)[-1] or "127.0.0.1:9400"
        raise argparse.ArgumentTypeError(
            f"not an http(s) URL: {text!r} (give the scheme, e.g. http://{hint})"
        )
    try:
        parts.port  # noqa: B018  (raises on a port outside 0..65535 or not a number)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"bad port in {text!r}: {exc}") from exc
    if not parts.hostname:
        raise argparse.ArgumentTypeError(f"no host in {text!r} (e.g. http://127.0.0.1:9400)")
    return value.rstrip("/")
