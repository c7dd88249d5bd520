"""The part of ``rollout-sidecar attach`` that runs inside the job, configured by its environment
(without :data:`URL_ENV` nothing is patched); :data:`BOOTSTRAP_DIR` leads the child's ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["BOOTSTRAP_DIR", "POOLED_ENV", "RUN_ID_ENV", "TOKEN_FILE_ENV", "URL_ENV", "run_id_for", "say"]

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
URL_ENV = "ROLLOUT_SIDECAR_ATTACH_URL"
RUN_ID_ENV = "ROLLOUT_SIDECAR_ATTACH_RUN_ID"
TOKEN_FILE_ENV = "ROLLOUT_SIDECAR_ATTACH_TOKEN_FILE"
POOLED_ENV = "ROLLOUT_SIDECAR_ATTACH_POOLED"


def say(message: str) -> None:
    sys.stderr.write(f"rollout-sidecar attach: {message}\n")


def run_id_for(output: str | os.PathLike[str] | None, environ: Mapping[str, str] = os.environ) -> str:
    """The run id: ``$ROLLOUT_SIDECAR_ATTACH_RUN_ID`` (``--run-id``), else ``$NEMO_GYM_OTEL_RUN_ID``,
    else ``$SLURM_JOB_ID-<output stem>``, else ``<output stem>-<local time>``; characters a run id
    cannot hold become ``-``."""
    chosen = environ.get(RUN_ID_ENV) or environ.get("NEMO_GYM_OTEL_RUN_ID")
    if not chosen:
        stem = Path(output).stem if output else "rollouts"
        job = environ.get("SLURM_JOB_ID")
        chosen = f"{job}-{stem}" if job else f"{stem}-{time.strftime('%Y%m%dT%H%M%S')}"
    fitted = re.sub(r"[^A-Za-z0-9._:@-]", "-", chosen).lstrip("._:@-")[:128]
    return fitted or "run"
