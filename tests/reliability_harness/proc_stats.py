"""What a process costs, read from Linux ``/proc``: resident memory, its peak, CPU seconds.

The harness's scenarios and the benchmarks measure the sidecar process from outside, so that
the figures include everything it does (threads, native code, the allocator's slack).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cpu_seconds", "peak_resident_bytes", "resident_bytes"]


def _status_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def resident_bytes(pid: int) -> int:
    """``VmRSS`` of ``pid``: its resident memory now."""
    return _status_bytes(pid, "VmRSS")


def peak_resident_bytes(pid: int) -> int:
    """``VmHWM`` of ``pid``: the most resident memory it has had."""
    return _status_bytes(pid, "VmHWM")


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user+system CPU seconds of ``pid``, of its child processes still running)."""
    tick = os.sysconf("SC_CLK_TCK")

    def stat(path: Path) -> list[str] | None:
        try:
            return path.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            return None

    own = stat(Path(f"/proc/{pid}/stat"))
    if own is None:
        raise RuntimeError(f"no /proc/{pid}/stat")
    children = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = stat(entry / "stat")
            if fields is not None and fields[1] == str(pid):
                children += (int(fields[11]) + int(fields[12])) / tick
    return (int(own[11]) + int(own[12])) / tick, children
