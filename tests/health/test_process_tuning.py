"""``health.process_tuning``: the one place that changes process-global interpreter settings,
and only where an entry point owns the process."""

from __future__ import annotations

import ast
import gc
import sys
from pathlib import Path

import pytest

from health import process_tuning
from health.process_tuning import collector_paused, freeze_long_lived, own_process

_ROOT = Path(__file__).resolve().parents[2]
_GLOBAL_SETTERS = {
    ("gc", "disable"),
    ("gc", "enable"),
    ("gc", "freeze"),
    ("gc", "unfreeze"),
    ("gc", "set_threshold"),
    ("sys", "setswitchinterval"),
}


def _setter_calls(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and (node.func.value.id, node.func.attr) in _GLOBAL_SETTERS
        ):
            found.append(f"{path.relative_to(_ROOT)}:{node.lineno} {node.func.value.id}.{node.func.attr}")
    return found


def test_only_the_helper_changes_process_global_settings() -> None:
    modules = [
        p for package in ("health", "sidecar", "dispatcher_client") for p in (_ROOT / package).rglob("*.py")
    ]
    offenders = [call for path in modules if path.name != "process_tuning.py" for call in _setter_calls(path)]
    assert offenders == []


def test_a_process_no_entry_point_owns_keeps_its_settings() -> None:
    assert process_tuning.owner() is None
    assert gc.isenabled()
    with collector_paused(freeze_after=True):
        assert gc.isenabled()
    frozen = gc.get_freeze_count()
    freeze_long_lived()
    assert gc.get_freeze_count() == frozen


@pytest.mark.parametrize("entry", ["health-check", "serve"])
def test_an_owned_process_is_tuned_while_it_runs_and_restored_after(entry: process_tuning.Entry) -> None:
    thresholds, interval = gc.get_threshold(), sys.getswitchinterval()
    with own_process(entry):
        assert process_tuning.owner() == entry
        with collector_paused():
            assert not gc.isenabled()
        assert gc.isenabled()
        if entry == "serve":
            assert gc.get_threshold()[0] == process_tuning.SERVE_GC_THRESHOLD
            assert sys.getswitchinterval() <= process_tuning.SERVE_SWITCH_INTERVAL_S + 1e-9
    assert process_tuning.owner() is None
    assert (gc.get_threshold(), sys.getswitchinterval()) == (thresholds, interval)
    assert gc.isenabled()


def test_pauses_on_several_threads_nest_until_the_last_one_ends() -> None:
    """Two builds on worker threads overlap (a page's perf summary and a ``/report``): the
    collector stays off until both have ended, whichever ends first."""
    import threading

    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with collector_paused():
            second_in.set()
            first_out.wait(10)
            seen["after the first ended"] = gc.isenabled()

    with own_process("serve"):
        threads = [threading.Thread(target=first), threading.Thread(target=second)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert gc.isenabled()
    assert seen == {"after the first ended": False}
