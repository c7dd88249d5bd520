"""What the live view shows, read from the sidecar's own ``/metrics`` endpoint.

The demo reads latency quantiles, the drain margin, outcomes and health verdicts the way
Prometheus would: by scraping the exposition and picking one run's series. The parse is pure
(:func:`parse_metrics`); :func:`scrape` only adds the HTTP request.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["SidecarView", "parse_metrics", "scrape"]

_P = "rollout_sidecar_"


@dataclass(slots=True)
class SidecarView:
    """One run's series from a scrape (simulated seconds for durations)."""

    completed: int = 0
    failed: Counter[str] = field(default_factory=Counter)
    drained: int = 0
    samples: int = 0
    quantiles: dict[str, float] = field(default_factory=dict)
    """``"0.5"``, ``"0.75"``, ``"0.95"`` -> seconds, once the tracker has samples."""
    drain_margin: float | None = None
    verdicts: Counter[str] = field(default_factory=Counter)
    findings: Counter[str] = field(default_factory=Counter)
    tasks_closed: int = 0
    tokens: Counter[str] = field(default_factory=Counter)
    inflight: int = 0
    stragglers: int = 0
    straggler_threshold: float | None = None
    """``None`` until a straggler rule applies (the gauge is ``+Inf``)."""
    oldest_age: float | None = None
    oldest: dict[str, Any] | None = None
    """The longest-running in-flight rollout from ``GET /v1/runs/{id}/inflight`` (no payload)."""

    @property
    def checked(self) -> int:
        return sum(self.verdicts.values())


#: Series kept as one value: the view's attribute and the value's type.
_SCALARS: dict[str, tuple[str, type]] = {
    "rollouts_completed_total": ("completed", int),
    "rollouts_drained_total": ("drained", int),
    "tracker_samples": ("samples", int),
    "drain_margin_seconds": ("drain_margin", float),
    "health_tasks_closed": ("tasks_closed", int),
    "inflight_rollouts": ("inflight", int),
    "inflight_stragglers": ("stragglers", int),
}
#: Series kept per label: the view's dict and the label that keys it.
_KEYED = {"health_rollouts": ("verdicts", "verdict"), "tokens_total": ("tokens", "kind")}


def _keep(view: SidecarView, name: str, labels: dict[str, str], value: float) -> None:
    """One sample of the run into ``view``."""
    if name in _SCALARS:
        attribute, kind = _SCALARS[name]
        setattr(view, attribute, kind(value))
    elif name in _KEYED:
        attribute, label = _KEYED[name]
        getattr(view, attribute)[labels[label]] = int(value)
    elif name == "rollouts_failed_total":
        view.failed[labels["failure_class"]] += int(value)
    elif name == "task_duration_quantile_seconds" and "quantile" in labels:
        view.quantiles[labels["quantile"]] = value
    elif name == "health_findings" and value:
        view.findings[labels["check"]] = int(value)
    elif name == "straggler_threshold_seconds" and math.isfinite(value):
        view.straggler_threshold = value
    elif name == "inflight_oldest_age_seconds" and value:
        view.oldest_age = value


def parse_metrics(text: str, run_id: str) -> SidecarView:
    """The series of ``run_id`` in a Prometheus text exposition."""
    view = SidecarView()
    for family in text_string_to_metric_families(text):
        if not family.name.startswith(_P):
            continue
        for sample in family.samples:
            if sample.labels.get("run_id") == run_id:
                _keep(view, sample.name.removeprefix(_P), sample.labels, sample.value)
    return view


async def scrape(client: httpx.AsyncClient, run_id: str) -> tuple[str, SidecarView]:
    """``GET /metrics`` and the oldest in-flight rollout (raises ``httpx.HTTPError``): text and view."""
    response = await client.get("/metrics")
    response.raise_for_status()
    view = parse_metrics(response.text, run_id)
    inflight = await client.get(f"/v1/runs/{run_id}/inflight", params={"limit": 1})
    if inflight.status_code == 200:
        oldest = inflight.json()["oldest"]
        view.oldest = oldest[0] if oldest else None
    return response.text, view
