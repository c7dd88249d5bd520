"""rollout-sidecar: the service that runs beside a NeMo Gym dispatcher.

Importing this package must stay cheap and server-free: ``dispatcher_client`` imports
``sidecar.perf`` from it.
"""
