"""normalize_ignored_checks: ids trimmed, validated against the registry, deduplicated."""

from __future__ import annotations

import pytest

from health import CHECK_IDS, normalize_ignored_checks


def test_none_and_empty() -> None:
    assert normalize_ignored_checks(None) == ()
    assert normalize_ignored_checks("") == ()
    assert normalize_ignored_checks([" ", ""]) == ()


def test_string_is_split_stripped_and_deduplicated_in_first_seen_order() -> None:
    assert normalize_ignored_checks(" model_call_failed, agent_turn_hollow ,model_call_failed,") == (
        "model_call_failed",
        "agent_turn_hollow",
    )


def test_every_registry_id_is_accepted() -> None:
    assert normalize_ignored_checks(CHECK_IDS) == CHECK_IDS


def test_sequence_elements_are_not_split() -> None:
    with pytest.raises(ValueError, match=r"^Unknown rollout health check\(s\): a,b$"):
        normalize_ignored_checks(["a,b"])


def test_unknown_ids_are_listed_sorted() -> None:
    with pytest.raises(ValueError, match=r"^Unknown rollout health check\(s\): alpha, zeta$"):
        normalize_ignored_checks("zeta,model_call_failed,alpha")
