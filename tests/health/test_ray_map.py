"""The Ray map on a real local two-node cluster: same bytes as the local runner and the vectors.

One cluster (two nodes of one CPU each, no dashboard, small object stores)
serves the whole module. Splits are tiny so a few megabytes make hundreds of tasks, and
tasks are pinned round-robin to both nodes.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[ray]')")
cluster_utils = pytest.importorskip("ray.cluster_utils", reason="this Ray has no ray.cluster_utils")

from health.ray_map import RayMapStats, map_on_ray  # noqa: E402
from health.reduce import HealthReducer  # noqa: E402
from health.runner import map_into_reducer  # noqa: E402

from .shard_corpus import write_shards  # noqa: E402

NODE_ARGS: dict[str, Any] = {"num_cpus": 1, "object_store_memory": 80 << 20}


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, list[str]]]:
    """A two-node cluster and the ids of its nodes."""
    try:
        local = cluster_utils.Cluster(
            initialize_head=True, head_node_args={**NODE_ARGS, "include_dashboard": False}
        )
        local.add_node(**NODE_ARGS)
        ray.init(address=local.address, log_to_driver=False, logging_level="WARNING")
        local.wait_for_nodes()
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"cannot start a local Ray cluster here: {exc}")
    nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    assert len(nodes) == 2
    try:
        yield local, nodes
    finally:
        ray.shutdown()
        local.shutdown()


def _reports(reducer: HealthReducer) -> tuple[bytes, bytes]:
    return reducer.summary_bytes(), b"".join(reducer.iter_verdict_lines())


def _examples(spec_examples: Path) -> list[Path]:
    return sorted(path for path in (spec_examples / "health").iterdir() if path.is_dir())


def test_vectors_on_both_nodes(
    cluster: tuple[Any, list[str]], spec_examples: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, nodes = cluster
    monkeypatch.chdir(tmp_path)
    used: set[str] = set()
    for example in _examples(spec_examples):
        args = json.loads((example / "args.json").read_text())
        shutil.copytree(example, tmp_path / example.name)
        relative = f"{args['run_dir']}/{args['rollout_file'] or 'rollouts.jsonl'}"
        stats = RayMapStats()
        reducer = map_on_ray(
            [relative],
            ignored_checks=frozenset(args["ignored_checks"]),
            split_bytes=64,
            node_ids=nodes,
            stats=stats,
        )
        expected = example / "expected"
        assert _reports(reducer) == (
            (expected / "quality_summary.json").read_bytes(),
            (expected / "rollout_verdicts.jsonl").read_bytes(),
        ), example.name
        used.update(stats.ran_on.values())
    assert used == set(nodes)


def test_shards_on_both_nodes_equal_the_local_runner(cluster: tuple[Any, list[str]], tmp_path: Path) -> None:
    _, nodes = cluster
    paths = [str(path) for path in write_shards(tmp_path / "run", tasks=60, pad=20_000)]
    size = sum(Path(path).stat().st_size for path in paths)
    assert size > 1 << 20
    stats = RayMapStats()
    ray_reducer = map_on_ray(paths, split_bytes=8 << 10, node_ids=nodes, stats=stats)
    local = map_into_reducer(paths, workers=2, ignored_checks=frozenset())
    assert stats.tasks >= 200
    per_node = Counter(stats.ran_on.values())
    assert set(per_node) == set(nodes) and min(per_node.values()) >= stats.tasks // 3
    assert ray_reducer.compact_digests() == local.compact_digests()
    assert _reports(ray_reducer) == _reports(local)


def test_ignored_checks_reach_the_tasks(cluster: tuple[Any, list[str]], tmp_path: Path) -> None:
    paths = [str(path) for path in write_shards(tmp_path / "run")]
    ignored = frozenset({"record_unreadable", "rollout_duplicate_identity", "agent_turn_hollow"})
    ray_reducer = map_on_ray(paths, ignored_checks=ignored, split_bytes=256)
    local = map_into_reducer(paths, workers=1, ignored_checks=ignored)
    assert _reports(ray_reducer) == _reports(local)


def test_a_node_removed_mid_run(cluster: tuple[Any, list[str]], tmp_path: Path) -> None:
    """Tasks in flight on a node that dies are retried elsewhere; the reports do not change."""
    local_cluster, nodes = cluster
    extra = local_cluster.add_node(**NODE_ARGS)
    local_cluster.wait_for_nodes()
    extra_id = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["NodeID"] not in nodes)
    paths = [str(path) for path in write_shards(tmp_path / "run", tasks=40, pad=8_000)]
    stats = RayMapStats()
    removed_after: list[int] = []

    def remove_once(done: int, total: int) -> None:
        if not removed_after and len(stats.ran_on) >= 6:
            removed_after.append(stats.submitted)
            local_cluster.remove_node(extra, allow_graceful=False)

    reducer = map_on_ray(
        paths, split_bytes=4 << 10, node_ids=[*nodes, extra_id], stats=stats, progress=remove_once
    )
    assert removed_after, "the map finished before the node could be removed"
    local = map_into_reducer(paths, workers=1, ignored_checks=frozenset())
    assert _reports(reducer) == _reports(local)
    # Splits submitted to the doomed node before it died, but finished by another node: retried.
    moved = [
        index
        for index, node in stats.ran_on.items()
        if index < removed_after[0] and index % 3 == 2 and node != extra_id
    ]
    assert moved, stats.ran_on
    assert stats.ran_on.keys() == set(range(stats.tasks))
