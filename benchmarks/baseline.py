"""What the benchmarks share: another commit's build to time beside ours, quantiles, verdicts.

Benchmarks quote ratios against a baseline measured in the same run on the same (noisy, shared)
machine; this is how they get the baseline's code: our three packages at ``ref``, extracted with
``git archive`` (no checkout, no install), importable by putting ``into`` first on the path.
Where ``ref`` has native extensions (``setup.py``), they are built in place too, so a baseline
is not timed on its slower pure-Python fallbacks.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
from collections.abc import Sequence
from io import BytesIO
from pathlib import Path

__all__ = ["PACKAGES", "quantile", "unpack_baseline", "verdict"]

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sidecar", "health", "dispatcher_client")


def unpack_baseline(ref: str, into: Path) -> Path:
    """Our packages at commit ``ref``, extracted under ``into``; returns ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, *PACKAGES],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    _build_extensions(ref, into)
    return into


def _build_extensions(ref: str, into: Path) -> None:
    """``ref``'s optional C extensions built inside ``into`` (nothing to do before it had any)."""
    has_setup = subprocess.run(
        ["git", "-C", str(ROOT), "cat-file", "-e", f"{ref}:setup.py"], capture_output=True
    )
    if has_setup.returncode != 0:
        return
    setup = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:setup.py"], check=True, capture_output=True
    ).stdout
    (into / "setup.py").write_bytes(setup)
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=into, capture_output=True, text=True
    )
    if built.returncode != 0:
        print(f"baseline {ref}: native extensions not built; it runs its fallbacks\n{built.stderr[-2000:]}")


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``: the value at rank ``floor(q * n)`` of the sorted
    sample, so ``q=0.99`` of 100 values is the largest, never an interpolation (nan if empty)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def verdict(name: str, value: float, limit: float, unit: str = "") -> bool:
    """Print ``PASS``/``FAIL`` for one target (``value <= limit``) and return whether it held."""
    held = value <= limit
    print(f"  {'PASS' if held else 'FAIL'}  {name}: {value:.4g}{unit} (target <= {limit:.4g}{unit})")
    return held
