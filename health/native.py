"""Whether the native part (the C extensions ``health._json_vet`` and ``health._payload_spans``)
is used, and which vetter is active: one switch, read once at import.

``ROLLOUT_SIDECAR_NATIVE=0`` in the environment turns the native part off at run time, without
a rebuild: :mod:`health.json_vet` then vets with simdjson and :mod:`health.payload_spans` has
msgspec decode whole lines, exactly as an install without a C compiler does. Any other value
(or none) uses the extensions where they are built. It is read when those modules are first
imported, so it holds for the whole process (set it before starting it).
"""

from __future__ import annotations

import os
from typing import Final

__all__ = ["NATIVE_ENV", "native_allowed", "native_status"]

NATIVE_ENV: Final = "ROLLOUT_SIDECAR_NATIVE"
"""The environment variable: ``0`` turns the native part off."""


def native_allowed() -> bool:
    """False where :data:`NATIVE_ENV` is ``0`` (the native part is then never imported)."""
    return os.environ.get(NATIVE_ENV, "").strip() != "0"


def native_status() -> str:
    """One line for ``rollout-sidecar --version``: which vetter runs and why, as this process
    imports it (an installed package, not a source tree that shadows it, tells the truth)."""
    from . import json_vet, payload_spans

    if not native_allowed():
        reason = f"native part turned off by {NATIVE_ENV}=0"
    elif json_vet.native_vet is None:
        reason = "native part not built: no C compiler at install"
    else:
        import health._json_vet as built

        loops = "vector loops" if built.VECTOR_PATHS else "portable build"
        reason = f"native part built ({loops}), from {os.path.dirname(built.__file__)}"
    scan = "native" if payload_spans.NATIVE else "msgspec"
    return f"JSON vetter: {json_vet.VETTER}; payload scan: {scan} ({reason})"
