"""The reliability suite: the service and its client under faults, load and abuse, with figures.

Each scenario module exposes one function that runs a bounded number of trials against real
processes on 127.0.0.1 and returns a result dataclass (counts, percentiles, and the list of
violations, empty when the promise held). ``tests/reliability`` runs them small in CI and
asserts no violation; ``python -m tests.reliability_harness`` runs them at full size and prints
the figures quoted in ``docs/reliability.md``.
"""
