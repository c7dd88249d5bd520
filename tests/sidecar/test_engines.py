"""The default engine bundle shares one trajectory validation between ``ng_perf`` and the digest.

Whatever the order of the two calls, and whether the memo hits or not, both results must equal
the stand-alone functions' (``build_ng_perf``, ``compact_digest(digest_record(...))``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from health.compact import compact_digest
from health.contract import check_trajectory
from health.digest import digest_record, digest_record_with_trajectory
from sidecar.demo.synthetic import FaultRates, SyntheticConfig, generate_rows
from sidecar.ingest.engines import default_engines
from sidecar.perf import build_ng_perf


def _rows() -> list[dict[str, Any]]:
    config = SyntheticConfig(
        num_tasks=30, repeats_per_task=2, payload_bytes_per_call=256, faults=FaultRates.mixed(0.06)
    )
    rows = list(generate_rows(config, 7))
    valid = next(row for row in rows if isinstance(row.get("ng_trajectory"), dict))
    rows.append({"_ng_task_index": None, "ng_trajectory": valid["ng_trajectory"]})  # invalid identity
    rows.append({"_ng_task_index": 1, "ng_trajectory": [1, 2]})
    rows.append({"_ng_task_index": 2, "ng_trajectory": {"task_id": "t"}})
    return rows


@pytest.mark.parametrize("ng_perf_first", [True, False])
def test_shared_validation_gives_the_stand_alone_results(ng_perf_first: bool) -> None:
    engines = default_engines()
    kwargs = {"source_path": "rollouts.jsonl", "ignored_checks": frozenset()}
    for ordinal, row in enumerate(_rows()):
        expected_perf = build_ng_perf(row, 12.5)
        expected_digest = compact_digest(
            digest_record(row, ordinal=ordinal, line_number=ordinal + 1, **kwargs)  # type: ignore[arg-type]
        )
        if ng_perf_first:
            perf = engines.build_ng_perf(row, 12.5)
            digest = engines.digest_record(row, ordinal=ordinal, line_number=ordinal + 1, **kwargs)
        else:
            digest = engines.digest_record(row, ordinal=ordinal, line_number=ordinal + 1, **kwargs)
            perf = engines.build_ng_perf(row, 12.5)
        assert perf == expected_perf
        assert digest == expected_digest
        # A second ng_perf of the same row (the duplicate path) validates afresh, same result.
        assert engines.build_ng_perf(row, 12.5) == expected_perf


def test_a_different_trajectory_object_is_never_served_from_the_memo() -> None:
    engines = default_engines()
    row = next(row for row in _rows() if isinstance(row.get("ng_trajectory"), dict))
    engines.build_ng_perf(row, None)
    other = copy.deepcopy(row)
    other["ng_trajectory"]["model_calls"] = []
    assert engines.build_ng_perf(other, None) == build_ng_perf(other, None)
    assert engines.digest_record(other, ordinal=0) == compact_digest(digest_record(other, ordinal=0))


def test_digest_hands_back_its_validation() -> None:
    for row in _rows():
        digest, checked = digest_record_with_trajectory(row, ordinal=3)
        assert digest == digest_record(row, ordinal=3)
        raw = row.get("ng_trajectory")
        identity_ok = row.get("_ng_task_index", 0) is not None
        if raw is None or not identity_ok:
            assert checked is None
        else:
            assert checked is not None
            assert checked[1] == check_trajectory(raw)[1]
            assert (checked[0] is None) == (check_trajectory(raw)[0] is None)
            again, _ = digest_record_with_trajectory(row, ordinal=3, checked=checked)
            assert again == digest
