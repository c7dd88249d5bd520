"""Print ``name==floor`` for each dependency in ``[tool.rollout-sidecar] floor-tested``.

The floor is the ``>=`` bound of the project's own requirement, so the constraints CI installs for
the oldest-versions run come from the one place the ranges are written.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement


def floors(pyproject: Path) -> list[str]:
    data = tomllib.loads(pyproject.read_text())
    wanted = data["tool"]["rollout-sidecar"]["floor-tested"]
    requirements = {Requirement(r).name: Requirement(r) for r in data["project"]["dependencies"]}
    pins = []
    for name in wanted:
        lower = [s.version for s in requirements[name].specifier if s.operator == ">="]
        if len(lower) != 1:
            sys.exit(f"{pyproject}: {name} needs exactly one >= floor, has {requirements[name].specifier}")
        pins.append(f"{name}=={lower[0]}")
    return pins


if __name__ == "__main__":
    sys.stdout.write("\n".join(floors(Path(__file__).resolve().parent.parent / "pyproject.toml")) + "\n")
