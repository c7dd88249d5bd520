"""``rollout-sidecar demo`` (:mod:`sidecar.demo.run`) and the synthetic NeMo Gym rollouts it, the
tests and the benchmarks use (:mod:`sidecar.demo.synthetic`)."""
