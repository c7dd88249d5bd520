"""``rollout-sidecar demo`` (:mod:`sidecar.demo.run`) and what its fake agent answers
(:mod:`sidecar.demo.agent`)."""
