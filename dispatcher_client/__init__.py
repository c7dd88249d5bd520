"""What a dispatcher imports to talk to rollout-sidecar: fail-open clients, never the server's
dependencies (no starlette, uvicorn, prometheus, structlog or sqlite)."""

from __future__ import annotations

import logging

from .client import ClientClosed, SidecarAuthError, SidecarClient, SidecarError, SidecarUnreachable
from .config import ClientConfig, ClientStats
from .sync import RemoteLatencyTracker, SyncSidecarClient

# A library's loggers print nothing until the application configures logging.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "ClientClosed", "ClientConfig", "ClientStats", "RemoteLatencyTracker", "SidecarAuthError",
    "SidecarClient", "SidecarError", "SidecarUnreachable", "SyncSidecarClient",
]
