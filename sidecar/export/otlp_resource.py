"""The OTel resource of the push, named as NeMo Gym (0.7.0, on nemo-lens 0.1.0) names a job's.

So the sidecar's series sit beside NeMo Gym's own in the collector ``gym eval submit`` runs:

- ``nemo.run.id``: ``NEMO_GYM_OTEL_RUN_ID``, else ``SLURM_JOB_ID``, else an id generated once per
  process (12 hex digits), the order NeMo Gym resolves its run id in;
- ``service.name``: NeMo Gym's per-server style, ``<OTEL_SERVICE_NAME or nemo-gym>/rollout-sidecar``;
  with ``NEMO_GYM_OTEL_SERVICE_NAME_PER_SERVER=0`` the base name alone;
- ``service.instance.id``: ``<nemo.run.id>-rollout-sidecar-<host>`` (nemo-lens uses
  ``<run id>-rank<rank>`` for its processes); stable across a restart on the same host, so the
  cumulative series continue;
- the ``slurm.*`` attributes nemo-lens detects (``slurm.job.id``, ``slurm.job.name``,
  ``slurm.nodelist``, ``slurm.nnodes``, ``slurm.ntasks``, ``slurm.cluster.name``) when
  ``SLURM_JOB_ID`` is set, plus ``slurm.procid`` and ``slurm.nodeid`` (ours: which task and node
  of the job the sidecar is);
- ``host.name``, ``service.version``; ``OTEL_RESOURCE_ATTRIBUTES`` adds to these (ours win).

The sidecar's own run id is a data-point attribute, ``rollout_sidecar.run_id``, never a resource
attribute: one sidecar serves many runs, and the collector stamps its own ``run_id``.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Mapping
from importlib import metadata

__all__ = ["NEMO_RUN_ID", "SERVICE_SUFFIX", "nemo_run_id", "resource_attributes", "service_name"]

NEMO_RUN_ID = "nemo.run.id"
SERVICE_SUFFIX = "rollout-sidecar"
_DEFAULT_BASE = "nemo-gym"
#: Slurm variable -> attribute, as nemo-lens 0.1.0 names them, then the two we add.
_SLURM = (
    ("SLURM_JOB_ID", "slurm.job.id"),
    ("SLURM_JOB_NAME", "slurm.job.name"),
    ("SLURM_NODELIST", "slurm.nodelist"),
    ("SLURM_NNODES", "slurm.nnodes"),
    ("SLURM_NTASKS", "slurm.ntasks"),
    ("SLURM_CLUSTER_NAME", "slurm.cluster.name"),
    ("SLURM_PROCID", "slurm.procid"),
    ("SLURM_NODEID", "slurm.nodeid"),
)
#: Longest value taken from the environment into an attribute.
_MAX_VALUE = 256
_GENERATED_RUN_ID = uuid.uuid4().hex[:12]


def _get(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()[:_MAX_VALUE]


def _off(value: str) -> bool:
    return value.strip().lower() in ("0", "false", "no", "off")


def nemo_run_id(env: Mapping[str, str] | None = None) -> str:
    """NeMo Gym's run id: ``NEMO_GYM_OTEL_RUN_ID``, else ``SLURM_JOB_ID``, else this process's own."""
    environ = os.environ if env is None else env
    return _get(environ, "NEMO_GYM_OTEL_RUN_ID") or _get(environ, "SLURM_JOB_ID") or _GENERATED_RUN_ID


def service_name(env: Mapping[str, str] | None = None) -> str:
    """``<OTEL_SERVICE_NAME or nemo-gym>/rollout-sidecar`` (the base alone when per-server names are off)."""
    environ = os.environ if env is None else env
    base = _get(environ, "OTEL_SERVICE_NAME") or _DEFAULT_BASE
    if _off(environ.get("NEMO_GYM_OTEL_SERVICE_NAME_PER_SERVER", "1")):
        return base
    return base if base.endswith("/" + SERVICE_SUFFIX) else f"{base}/{SERVICE_SUFFIX}"


def _version() -> str:
    try:
        return metadata.version("rollout-sidecar")
    except metadata.PackageNotFoundError:
        return "unknown"


def resource_attributes(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The resource attributes of every push (``OTEL_RESOURCE_ATTRIBUTES`` is merged by the caller)."""
    environ = os.environ if env is None else env
    run_id = nemo_run_id(environ)
    host = socket.gethostname()
    attributes = {
        "service.name": service_name(environ),
        "service.version": _version(),
        "service.instance.id": f"{run_id}-{SERVICE_SUFFIX}-{host}",
        NEMO_RUN_ID: run_id,
        "host.name": host,
    }
    if _get(environ, "SLURM_JOB_ID"):
        for variable, attribute in _SLURM:
            value = _get(environ, variable)
            if value:
                attributes[attribute] = value
    return attributes
