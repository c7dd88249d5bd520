"""The install never pins what NeMo Gym's environment also holds: ranges, tested at both ends."""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements() -> dict[str, Requirement]:
    return {Requirement(r).name: Requirement(r) for r in PYPROJECT["project"]["dependencies"]}


def test_no_dependency_is_pinned() -> None:
    pinned = {name: str(r.specifier) for name, r in _requirements().items()
              if any(s.operator in ("==", "===") for s in r.specifier)}
    assert not pinned, f"exact pins would downgrade NeMo Gym's environment: {pinned}"


def test_floor_tested_dependencies_have_a_floor_and_a_cap() -> None:
    requirements = _requirements()
    for name in PYPROJECT["tool"]["rollout-sidecar"]["floor-tested"]:
        operators = sorted(s.operator for s in requirements[name].specifier)
        assert operators == ["<", ">="], f"{name}: {requirements[name].specifier} (want >=floor,<next-major)"


def test_the_floors_ci_installs_are_the_pyproject_floors() -> None:
    spec = importlib.util.spec_from_file_location("dependency_floors", ROOT / ".ci" / "dependency_floors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pins = module.floors(ROOT / "pyproject.toml")
    requirements = _requirements()
    for pin in pins:
        name, version = pin.split("==")
        assert requirements[name].specifier.contains(version), (pin, str(requirements[name].specifier))
    assert [p.split("==")[0] for p in pins] == PYPROJECT["tool"]["rollout-sidecar"]["floor-tested"]
