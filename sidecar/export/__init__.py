"""What leaves the service: Prometheus metrics, the OTLP push, MLflow and W&B."""
