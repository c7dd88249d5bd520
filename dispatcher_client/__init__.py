"""What a dispatcher imports to talk to rollout-sidecar: httpx, pydantic, orjson, the perf core.

- :class:`SidecarClient` (async) and :class:`SyncSidecarClient`: fail-open event clients.
- :class:`RemoteLatencyTracker`: drop-in ``DispatchLatencyTracker`` for NeMo Gym.
- :class:`Follower` (``dispatcher_client.follow``): turns a run directory's files into events.

Never imports the server (starlette, uvicorn, prometheus, structlog, sqlite).
"""

from __future__ import annotations

from ._core import ClientClosed, SidecarError
from .client import SidecarClient
from .config import ClientConfig, ClientStats
from .remote_tracker import RemoteLatencyTracker
from .sync import SyncSidecarClient

__all__ = [
    "ClientClosed",
    "ClientConfig",
    "ClientStats",
    "RemoteLatencyTracker",
    "SidecarClient",
    "SidecarError",
    "SyncSidecarClient",
]
