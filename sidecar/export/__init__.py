"""What leaves the service: Prometheus metrics, the OTLP push, MLflow and W&B."""


def version(distribution: str = "rollout-sidecar") -> str:
    """The installed version of ``distribution`` (``unknown`` when it is not installed)."""
    from importlib import metadata  # here: ``health-check`` imports this package and pays nothing

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"
