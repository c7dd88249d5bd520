"""Long-tailed task durations, shared by the generator, the demo agent server and benchmarks."""

from __future__ import annotations

import math
import random
from typing import Final

__all__ = ["sample_task_seconds"]

_MEDIAN_S: Final = 95.0
_SIGMA: Final = 0.75
_TAIL_PROBABILITY: Final = 0.06
_TAIL_ALPHA: Final = 1.4
_MIN_S: Final = 2.0
_MAX_S: Final = 4 * 3600.0


def sample_task_seconds(rng: random.Random) -> float:
    """Wall-clock seconds of one rollout: lognormal body (median ~95 s) plus a Pareto tail.

    About 6% of tasks are stragglers scaled by a Pareto(1.4) factor, which is what makes
    p95/p99 several times the median in real agentic runs. Clamped to [2 s, 4 h].
    """
    seconds = rng.lognormvariate(math.log(_MEDIAN_S), _SIGMA)
    if rng.random() < _TAIL_PROBABILITY:
        seconds *= rng.paretovariate(_TAIL_ALPHA)
    return min(max(seconds, _MIN_S), _MAX_S)
