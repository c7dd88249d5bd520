"""``rollout-sidecar demo`` (:mod:`sidecar.demo.run`) and the synthetic NeMo Gym rollouts its fake
agent answers with (:mod:`sidecar.demo.synthetic`)."""
