"""What leaves the service: Prometheus metrics, the OTLP push, MLflow and W&B."""

from importlib import metadata


def version(distribution: str = "rollout-sidecar") -> str:
    """The installed version of ``distribution`` (``unknown`` when it is not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"
