"""The part of ``rollout-sidecar attach`` that runs inside the job (a NeMo Gym command).

The launcher (``sidecar/http/attach.py``) puts :data:`BOOTSTRAP_DIR` first on the child's
``PYTHONPATH``; its ``sitecustomize`` loads :mod:`dispatcher_client.attach._nemo_gym` once
``nemo_gym.rollout_collection`` is imported. The launcher configures the child through these
environment variables (all optional but the first):

- ``ROLLOUT_SIDECAR_ATTACH_URL``: the sidecar's base URL; without it nothing is patched;
- ``ROLLOUT_SIDECAR_ATTACH_RUN_ID``: the run id (else see :func:`run_id_for`);
- ``ROLLOUT_SIDECAR_ATTACH_TOKEN_FILE``: file holding the bearer token (else ``$ROLLOUT_SIDECAR_TOKEN``);
- ``ROLLOUT_SIDECAR_ATTACH_POOLED``: ``1``: the drain margin is the run's pooled p75 over every
  process attached to it (``RemoteLatencyTracker(pooled=True)``).

Light by rule: the standard library, httpx, pydantic, orjson and ``dispatcher_client`` only.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from pathlib import Path

__all__ = ["BOOTSTRAP_DIR", "POOLED_ENV", "RUN_ID_ENV", "TOKEN_FILE_ENV", "URL_ENV", "run_id_for"]

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
URL_ENV = "ROLLOUT_SIDECAR_ATTACH_URL"
RUN_ID_ENV = "ROLLOUT_SIDECAR_ATTACH_RUN_ID"
TOKEN_FILE_ENV = "ROLLOUT_SIDECAR_ATTACH_TOKEN_FILE"
POOLED_ENV = "ROLLOUT_SIDECAR_ATTACH_POOLED"


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
