"""What a dispatcher imports to talk to rollout-sidecar (httpx + pydantic only)."""
