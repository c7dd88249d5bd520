"""A small PromQL scanner for the deploy tests: which series an expression selects.

Not a parser: it tokenizes (strings, Grafana variables, numbers and durations, identifiers,
brackets), skips label matchers, range brackets and grouping clauses, and keeps identifiers that
are neither function calls nor keywords. That is enough to check rules and panels against the
metric contract and to see each selector's label matchers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["SIDECAR_PREFIX", "Selector", "counter_function_args", "metric_names", "selectors"]

SIDECAR_PREFIX = "rollout_sidecar_"

_TOKEN = re.compile(
    r"""
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
    | (?P<var>\$\{[^}]*\}|\$\w+)
    | (?P<number>\d[\w.]*)
    | (?P<ident>[A-Za-z_:][\w:]*)
    | (?P<space>\s+)
    | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL,
)
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"})
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})
_AGGREGATION_CLAUSES = frozenset({("ident", "by"), ("ident", "without")})
_COUNTER_CALL = re.compile(r"\b(rate|irate|increase|resets)\s*\(\s*([A-Za-z_:][\w:]*)")

Selector = tuple[str, str]
"""``(series name, label matchers text)``; the matchers are ``""`` for a bare name."""


def _tokens(expr: str) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for match in _TOKEN.finditer(expr):
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            found.append((kind, match.group()))
    return found


def _skip_group(tokens: list[tuple[str, str]], start: int, open_: str, close: str) -> int:
    """Index just past the bracket group opening at ``tokens[start]`` (strings are single tokens)."""
    depth = 0
    for index in range(start, len(tokens)):
        kind, text = tokens[index]
        if kind == "other" and text == open_:
            depth += 1
        elif kind == "other" and text == close:
            depth -= 1
            if depth == 0:
                return index + 1
    raise ValueError(f"unbalanced {open_!r} in PromQL tokens {tokens!r}")


def _scan(expr: str) -> Iterator[Selector]:
    tokens = _tokens(expr)
    index = 0
    while index < len(tokens):
        kind, text = tokens[index]
        nxt = tokens[index + 1] if index + 1 < len(tokens) else ("", "")
        if kind == "other" and text == "[":
            index = _skip_group(tokens, index, "[", "]")
            continue
        if kind == "other" and text == "{":  # matchers without a name: {__name__=...}
            index = _skip_group(tokens, index, "{", "}")
            continue
        if kind != "ident":
            index += 1
            continue
        if text in _GROUPING:
            index = _skip_group(tokens, index + 1, "(", ")") if nxt == ("other", "(") else index + 1
            continue
        # A call, a keyword, or an aggregation written ``sum by (...) (...)``.
        if nxt == ("other", "(") or text.lower() in _KEYWORDS or nxt in _AGGREGATION_CLAUSES:
            index += 1
            continue
        if nxt == ("other", "{"):
            end = _skip_group(tokens, index + 1, "{", "}")
            yield text, "".join(t for _, t in tokens[index + 1 : end])
            index = end
        else:
            yield text, ""
            index += 1


def selectors(expr: str) -> list[Selector]:
    """Every series selector in the PromQL expression ``expr``, in order."""
    return list(_scan(expr))


def metric_names(expr: str) -> set[str]:
    """Series names (metric or recording-rule names) read by the PromQL expression ``expr``."""
    return {name for name, _ in _scan(expr)}


def counter_function_args(expr: str) -> list[tuple[str, str]]:
    """``(function, series name)`` for every rate/irate/increase/resets call on a plain selector."""
    return [(m.group(1), m.group(2)) for m in _COUNTER_CALL.finditer(expr)]
