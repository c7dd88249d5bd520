"""Run by every Python process of an attached job at start (this directory leads ``PYTHONPATH``).

A one-shot finder wraps ``nemo_gym.rollout_collection`` once executed; until then only the standard
library is imported. The ``sitecustomize`` this one shadows still runs.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

TARGET = "nemo_gym.rollout_collection"
#: ``dispatcher_client.attach.URL_ENV`` (not imported: that would load httpx in every process).
URL_ENV = "ROLLOUT_SIDECAR_ATTACH_URL"
_HERE = os.path.dirname(os.path.abspath(__file__))


def _instrument(module: ModuleType) -> None:
    """Hand the executed module to the instrumentation; whatever fails, the job runs unpatched."""
    try:
        try:
            from dispatcher_client.attach import _nemo_gym
        except ImportError:  # not installed in the job's Python: the launcher's copy, last on the path
            sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))
            from dispatcher_client.attach import _nemo_gym
        _nemo_gym.install(module)
    except Exception as exc:
        sys.stderr.write(
            f"rollout-sidecar attach: not instrumented ({type(exc).__name__}: {exc}); "
            "the job runs unpatched\n"
        )


class PostImportFinder:
    """Finds ``TARGET`` with the finders after it, and runs :func:`_instrument` after its code."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name != TARGET:
            return None
        sys.meta_path.remove(self)  # one shot: the search below, and any later import, go past it
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        execute = getattr(loader, "exec_module", None)
        if spec is None or execute is None:
            return spec

        def exec_module(module: ModuleType) -> None:
            execute(module)
            _instrument(module)

        try:
            loader.exec_module = exec_module  # type: ignore[union-attr]
        except AttributeError:
            sys.stderr.write(f"rollout-sidecar attach: cannot hook {name}; the job runs unpatched\n")
        return spec


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows: the next one on ``sys.path``."""
    path = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if os.environ.get(URL_ENV) and TARGET not in sys.modules:
    sys.meta_path.insert(0, PostImportFinder())
_chain()
