"""The directory ``rollout-sidecar attach`` puts first on the job's ``PYTHONPATH`` (its ``sitecustomize``)."""
