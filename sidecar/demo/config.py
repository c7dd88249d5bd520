"""What the demo runs: its size, its dispatch budget, and the clock that makes hours fit in seconds.

Task durations follow :func:`sidecar.demo.synthetic.sample_task_seconds` (median ~95 s, a Pareto
tail of stragglers), so a real run takes hours. The demo replays it on a compressed clock:
:class:`TimeScale` maps real seconds to *simulated* seconds (default 600, i.e. one simulated
minute per 0.1 s real). The fake agent server sleeps the real equivalent of each task's
simulated duration; the dispatcher measures real time and reports it scaled back up, so every
duration, quantile, drain margin and budget the demo shows is in simulated seconds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sidecar.demo.synthetic import FaultRates, SyntheticConfig

__all__ = [
    "DEFAULT_DURATION_S",
    "DEFAULT_TIME_SCALE",
    "MEAN_TASK_SECONDS",
    "DemoConfig",
    "DemoConfigError",
    "SimClock",
    "TimeScale",
    "demo_faults",
]

DEFAULT_TIME_SCALE: Final = 600.0
"""Simulated seconds per real second: one simulated minute every 0.1 s."""
DEFAULT_DURATION_S: Final = 30.0
"""Real seconds of dispatch budget (5 simulated hours at the default scale)."""
MEAN_TASK_SECONDS: Final = 139.0
"""Mean of ``sample_task_seconds`` capped at an hour (measured over 200k draws); sizes the default plan."""
_OVERBOOKING: Final = 1.1
"""Default plan = 110% of what the budget can dispatch, so the drain margin has work to stop."""


class DemoConfigError(ValueError):
    """A demo option is out of range; the message names it and the value given."""


@dataclass(frozen=True, slots=True)
class TimeScale:
    """Real <-> simulated seconds: ``simulated = real * factor``."""

    factor: float = DEFAULT_TIME_SCALE

    def __post_init__(self) -> None:
        if not (math.isfinite(self.factor) and self.factor > 0):
            raise DemoConfigError(f"time scale must be a positive number, got {self.factor!r}")

    def to_sim(self, real_seconds: float) -> float:
        return real_seconds * self.factor

    def to_real(self, sim_seconds: float) -> float:
        return sim_seconds / self.factor

    def describe(self) -> str:
        """``1 simulated minute = 0.1 s real (x600)``: the line every demo output starts with."""
        return f"1 simulated minute = {self.to_real(60.0):.3g} s real (x{self.factor:g})"


class SimClock:
    """Simulated seconds since the clock was created, from ``time.monotonic``."""

    __slots__ = ("_origin", "scale")

    def __init__(self, scale: TimeScale) -> None:
        self.scale = scale
        self._origin = time.monotonic()

    def now(self) -> float:
        return self.scale.to_sim(time.monotonic() - self._origin)


def demo_faults(rate: float = 0.012) -> FaultRates:
    """Every trajectory fault a live agent can produce, at ``rate`` each.

    Torn lines and duplicated identities are left out: they come from a crashed writer or a
    resumed run appending to the same file, not from an agent's reply.
    """
    from sidecar.demo.synthetic import FaultRates

    return replace(FaultRates.mixed(rate), unreadable_line=0.0, duplicate_identity=0.0)


@dataclass(frozen=True, slots=True)
class DemoConfig:
    """One demo run. ``tasks=None`` sizes the plan to overbook the budget by 10%."""

    duration_s: float = DEFAULT_DURATION_S
    """Real seconds of dispatch budget; in-flight tasks may finish up to one task timeout later."""
    tasks: int | None = None
    repeats: int = 4
    concurrency: int = 8
    time_scale: TimeScale = field(default_factory=TimeScale)
    task_timeout_s: float = 3600.0
    """Simulated seconds after which the agent gives up with a ``timeout_exceeded`` reply."""
    seed: int = 2026
    out_dir: Path | None = None
    payload_bytes_per_call: int = 1024
    model_calls_per_rollout: int = 3
    failure_rate: float = 0.06
    broken_task_fraction: float = 0.03
    fault_rate: float = 0.012

    def __post_init__(self) -> None:
        checks = (
            ("duration_s", self.duration_s > 0 and math.isfinite(self.duration_s)),
            ("tasks", self.tasks is None or self.tasks >= 1),
            ("repeats", self.repeats >= 1),
            ("concurrency", 1 <= self.concurrency <= 1024),
            ("task_timeout_s", self.task_timeout_s > 0 and math.isfinite(self.task_timeout_s)),
        )
        for name, ok in checks:
            if not ok:
                raise DemoConfigError(f"DemoConfig.{name} is out of range: {getattr(self, name)!r}")

    @property
    def budget_s(self) -> float:
        """The dispatch budget in simulated seconds."""
        return self.time_scale.to_sim(self.duration_s)

    @property
    def num_tasks(self) -> int:
        """``tasks``, or enough tasks that the plan exceeds the budget's capacity by 10%."""
        if self.tasks is not None:
            return self.tasks
        capacity = self.concurrency * self.budget_s / MEAN_TASK_SECONDS
        return max(1, math.ceil(_OVERBOOKING * capacity / self.repeats))

    @property
    def num_rollouts(self) -> int:
        return self.num_tasks * self.repeats

    def synthetic(self) -> SyntheticConfig:
        """The generator behind the agent's replies and the dispatcher's input rows."""
        from sidecar.demo.synthetic import SyntheticConfig

        return SyntheticConfig(
            num_tasks=self.num_tasks,
            repeats_per_task=self.repeats,
            model_calls_per_rollout=self.model_calls_per_rollout,
            payload_bytes_per_call=self.payload_bytes_per_call,
            faults=demo_faults(self.fault_rate),
            broken_task_fraction=self.broken_task_fraction,
            failure_rate=self.failure_rate,
            concurrency=self.concurrency,
        )
