"""``health`` never imports ``sidecar`` nor ``dispatcher_client`` (ARCHITECTURE.md, "Packages and
what each may import"): every module of the package is imported in a fresh interpreter and the
modules it loaded are listed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
_CODE = """
import importlib, pkgutil, sys, orjson, health
names = [m.name for m in pkgutil.walk_packages(health.__path__, "health.")]
for name in names:
    importlib.import_module(name)
sys.stdout.buffer.write(orjson.dumps({"imported": names, "loaded": sorted(sys.modules)}))
"""


def test_no_module_of_health_loads_sidecar_or_the_client() -> None:
    command = [sys.executable, "-c", _CODE]
    done = subprocess.run(command, cwd=REPO, capture_output=True, check=True, timeout=120)
    answer = orjson.loads(done.stdout)
    expected = {"health.cli", "health.runner", "health.digest", "health.contract.models"}
    assert expected <= set(answer["imported"]), sorted(answer["imported"])
    outside = [name for name in answer["loaded"] if name.split(".")[0] in ("sidecar", "dispatcher_client")]
    assert outside == [], f"importing health loaded {outside}"
