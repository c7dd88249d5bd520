"""Each file of the state damaged at seeded random offsets, then the real service restarted:
the report equals the batch check over the rows the journal still acknowledges, or the start is
refused with exit 2 and one line (``tests/reliability_harness/damage.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.damage import (
    DAMAGES,
    STATE_FILES,
    DamagedState,
    build_damage_state,
    damage_trial,
    unrecoverable_trial,
)

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)

_SEEDS = (1, 2)


@pytest.fixture(scope="module")
def damaged_state(tmp_path_factory: pytest.TempPathFactory) -> DamagedState:
    return build_damage_state(tmp_path_factory.mktemp("damage"), launch="fork")




@pytest.mark.parametrize("seed", _SEEDS)
@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("which", STATE_FILES)
def test_one_damaged_file_costs_at_most_its_records(
    damaged_state: DamagedState, tmp_path: Path, which: str, damage: str, seed: int
) -> None:
    result = damage_trial(damaged_state, tmp_path, which, damage, seed, launch="fork")
    no_violations(result.violations)
    assert len(result.outcomes) == 1


def test_a_start_that_cannot_recover_exits_2_with_one_line(
    damaged_state: DamagedState, tmp_path: Path
) -> None:
    result = unrecoverable_trial(damaged_state, tmp_path, launch="fork")
    no_violations(result.violations)
    (line,) = result.outcomes.values()
    assert line.startswith("rollout-sidecar serve: journal ") and "not an SQLite database" in line
