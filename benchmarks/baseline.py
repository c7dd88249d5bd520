"""Another commit's build, unpacked beside ours so a benchmark can time both in one run.

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
from io import BytesIO
from pathlib import Path

__all__ = ["PACKAGES", "unpack_baseline"]

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
