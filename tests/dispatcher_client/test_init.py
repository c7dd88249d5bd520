"""The package a dispatcher imports stays light."""

from __future__ import annotations

import subprocess
import sys

from .support import REPO_ROOT

FORBIDDEN = ("starlette", "uvicorn", "prometheus_client", "structlog", "sqlite3", "_sqlite3")


def test_importing_the_client_never_loads_the_server() -> None:
    code = (
        "import sys, dispatcher_client, dispatcher_client.follow, dispatcher_client.follow_cli\n"
        f"print(','.join(sorted(m for m in {FORBIDDEN!r} if m in sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "", f"dispatcher_client imported server modules: {out.stdout}"
