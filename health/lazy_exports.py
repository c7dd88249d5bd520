"""A package's public names imported on first access (PEP 562), from one table, so importing one
submodule (the perf core imports ``health.contract``) does not load them all. In ``health`` so
that ``health`` and ``sidecar`` both use it.
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
