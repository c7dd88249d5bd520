"""A writer process that replays planned file operations, for the tests of the follower.

The follower must cope with files another process writes: lines cut anywhere, files unlinked
and recreated, truncated. A test plans the operations (a JSON list of ``["write", path, hex]``,
``["sleep", seconds]``, ``["unlink", *paths]``, ``["truncate", path, size]``) and runs
:func:`writer_argv` as a separate process, so the follower reads while the writer writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["writer_argv"]

_SCRIPT = r"""
import os, sys, time, json
ops = json.load(open(sys.argv[1]))
handles = {}
def handle(path):
    if path not in handles:
        handles[path] = open(path, "ab", buffering=0)
    return handles[path]
for op in ops:
    if op[0] == "write":
        handle(op[1]).write(bytes.fromhex(op[2]))
    elif op[0] == "sleep":
        time.sleep(op[1])
    elif op[0] == "unlink":
        for path in list(handles):
            handles.pop(path).close()
        for path in op[1:]:
            if os.path.exists(path):
                os.unlink(path)
    elif op[0] == "truncate":
        os.truncate(op[1], min(op[2], os.path.getsize(op[1])))
"""


def writer_argv(ops_path: Path) -> list[str]:
    """The command of a writer process replaying the operations in the JSON file ``ops_path``
    (unbuffered appends, so the follower sees each piece as soon as it is written)."""
    return [sys.executable, "-c", _SCRIPT, str(ops_path)]
