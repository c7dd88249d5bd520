"""Another commit's build, unpacked beside ours so a benchmark can time both in one run.

Benchmarks quote ratios against a baseline measured in the same run on the same (noisy, shared)
machine; this is how they get the baseline's code: our three packages at ``ref``, extracted with
``git archive`` (no checkout, no install), importable by putting ``into`` first on the path.
"""

from __future__ import annotations

import subprocess
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
    return into
