"""What a dispatcher imports to talk to rollout-sidecar: httpx, pydantic, orjson, the perf core.

- :class:`SidecarClient` (async) and :class:`SyncSidecarClient`: fail-open event clients.
- :class:`RemoteLatencyTracker`: drop-in ``DispatchLatencyTracker`` for NeMo Gym.
- :class:`Follower` (``dispatcher_client.follow``): turns a run directory's files into events.

Never imports the server (starlette, uvicorn, prometheus, structlog, sqlite).
"""

from __future__ import annotations

import logging

from ._core import ClientClosed, SidecarAuthError, SidecarError, SidecarUnreachable
from .client import SidecarClient
from .config import ClientConfig, ClientStats
from .remote_tracker import RemoteLatencyTracker
from .sync import SyncSidecarClient

# A library's loggers print nothing until the application configures logging (Python's
# convention): without it, the last-resort handler would put every fail-open warning on stderr.
logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "ClientClosed",
    "ClientConfig",
    "ClientStats",
    "RemoteLatencyTracker",
    "SidecarAuthError",
    "SidecarClient",
    "SidecarError",
    "SidecarUnreachable",
    "SyncSidecarClient",
]
