"""The map phase on a Ray cluster: one Ray Core task per byte split, one reducer in the driver.

Tasks are retried on worker death and ``OSError``; outcomes are placed in split order as the
process pool's are, so the reports are the bytes a local run writes. Ray is optional, imported
only here; every node needs this package and the inputs at the same paths.
"""

from __future__ import annotations

import importlib
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .reduce import HealthReducer
from .splits import FileSplit, SplitOutcome, SplitPlacer, digest_split, plan_splits

__all__ = ["INSTALL_HINT", "RayMapStats", "default_split_bytes", "map_on_ray", "ray_missing_message"]

INSTALL_HINT = "--ray needs Ray: pip install '.[ray]' in the rollout-sidecar clone (it is not on PyPI)"
_MIN_SPLIT_BYTES = 1 << 20
_MAX_SPLIT_BYTES = 64 << 20
_SPLITS_PER_CPU = 4
_IN_FLIGHT_PER_CPU = 2
_HORIZON_WINDOWS = 4
_MAX_RETRIES = 4
_REACH_TIMEOUT_S = 10.0

ProgressCallback = Callable[[int, int], None]


def ray_missing_message() -> str | None:
    """``None`` when Ray can be imported, else the one-line install hint."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return INSTALL_HINT
    return None


@dataclass(slots=True)
class RayMapStats:
    """What a Ray map did: how many tasks, where each one's result came from."""

    tasks: int = 0
    split_bytes: int = 0
    submitted: int = 0
    """Tasks submitted so far (in split order), updated while the map runs."""
    ran_on: dict[int, str] = field(default_factory=dict)
    """Split index -> id of the node whose run of it was used (retries may move a split)."""


def default_split_bytes(total_bytes: int, cpus: int) -> int:
    """About four splits per cluster CPU, between 1 MiB and 64 MiB."""
    target = total_bytes // max(1, cpus * _SPLITS_PER_CPU)
    return max(_MIN_SPLIT_BYTES, min(_MAX_SPLIT_BYTES, target))


def _ray() -> Any:
    """The ``ray`` module, typed loosely: its stubs vary across releases and it may be absent."""
    return importlib.import_module("ray")


def _run_split(split: FileSplit, ignored_checks: frozenset[str]) -> SplitOutcome:
    ray = _ray()
    outcome = digest_split(split, ignored_checks)
    return replace(outcome, node=ray.get_runtime_context().get_node_id())


def _check_reachable(address: str) -> None:
    """Fail fast on a ``HOST:PORT`` nobody listens on: Ray itself retries for minutes."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=_REACH_TIMEOUT_S).close()
    except OSError as exc:
        raise ConnectionError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc


def _connect(address: str) -> bool:
    """Join or start a cluster; True when this call started the Ray session (and must end it)."""
    ray = _ray()

    if ray.is_initialized():
        return False
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
    if address == "local":
        options["include_dashboard"] = False
    else:
        _check_reachable(address)
        options["address"] = address
    try:
        ray.init(**options)
    except ConnectionError as exc:
        raise ConnectionError(f"cannot join the Ray cluster at {address!r}: {exc}") from exc
    return True


def map_on_ray(
    paths: Sequence[str],
    *,
    address: str = "auto",
    ignored_checks: frozenset[str] = frozenset(),
    progress: ProgressCallback | None = None,
    split_bytes: int | None = None,
    node_ids: Sequence[str] | None = None,
    stats: RayMapStats | None = None,
) -> HealthReducer:
    """Digest every non-blank line of ``paths`` (in order) on Ray into a fresh reducer.

    ``address``: ``auto``, ``local`` (in-process) or a cluster address; ``node_ids`` spreads tasks
    round-robin over those nodes (soft affinity), else Ray spreads them."""
    ray = _ray()
    node_affinity = importlib.import_module("ray.util.scheduling_strategies").NodeAffinitySchedulingStrategy
    started = _connect(address)
    try:
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        total = sum(os.path.getsize(path) for path in paths)
        size = split_bytes if split_bytes is not None else default_split_bytes(total, cpus)
        splits = plan_splits(paths, size)
        remote = ray.remote(num_cpus=1, max_retries=_MAX_RETRIES, retry_exceptions=[OSError])(_run_split)
        reducer = HealthReducer(ignored_checks)
        ignored = reducer.ignored_checks
        ignored_ref = ray.put(ignored)
        run_stats = stats if stats is not None else RayMapStats()
        run_stats.tasks, run_stats.split_bytes = len(splits), size

        def submit(split: FileSplit) -> Any:
            if node_ids:
                node = node_ids[split.index % len(node_ids)]
                strategy: Any = node_affinity(node, soft=True)
            else:
                strategy = "SPREAD"
            return remote.options(scheduling_strategy=strategy).remote(split, ignored_ref)

        window = cpus * _IN_FLIGHT_PER_CPU
        # Outcomes wait in ``arrived`` until every earlier split is placed; submitting at most
        # a few windows past the oldest unplaced split bounds that buffer behind a slow task.
        horizon = window * _HORIZON_WINDOWS
        pending: dict[Any, FileSplit] = {}
        placer = SplitPlacer(splits, ignored)
        submitted = done_bytes = 0
        while placer.placed < len(splits):
            while submitted < len(splits) and len(pending) < window and submitted - placer.placed < horizon:
                pending[submit(splits[submitted])] = splits[submitted]
                submitted += 1
                run_stats.submitted = submitted
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                split = pending.pop(ref)
                outcome: SplitOutcome = ray.get(ref)
                done_bytes += split.end - split.start
                run_stats.ran_on[split.index] = outcome.node
                reducer.extend(placer.add(outcome))
            if progress is not None:
                progress(done_bytes, total)
        return reducer
    finally:
        if started:
            ray.shutdown()
