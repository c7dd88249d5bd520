"""A package's public names imported on first access (PEP 562), from one table.

A package ``__init__`` that re-exports its submodules' names would import them all when any
one submodule is imported (the client's perf core imports ``health.contract``; ``health-check``
imports ``sidecar.export.trackers.cli``). With a table of where each name lives, the package binds
:func:`lazy_exports`' pair as its module ``__getattr__`` and ``__dir__`` and a name's submodule
loads when the name is first read. It lives in ``health`` so that ``health`` and ``sidecar``
both use it (``health`` never imports ``sidecar``).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, sources: Mapping[str, str], public: Iterable[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``sources`` maps each public name to its
    submodule (relative, as ``"_core"``); a name read once is bound in the package from then on."""
    exported = frozenset(public)

    def __getattr__(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{source}", package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exported})

    return __getattr__, __dir__
