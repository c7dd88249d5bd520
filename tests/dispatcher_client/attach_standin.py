"""A small stand-in for NeMo Gym, shaped as ``nemo_gym.rollout_collection`` calls what attach hooks.

``write_standin(root)`` writes the package ``nemo_gym`` and a job script ``job.py`` into ``root``.
The job (``job.py OUTPUT`` or ``job.py ++output_jsonl_fpath=OUTPUT``) collects 3 tasks x 2 repeats:
task 0 succeeds twice, task 1 once and once its ``/run`` fails (a failure row), task 2 is drained
by the budget. As in NeMo Gym, the collection loop
edits each row after ``_attach_ng_perf`` (here: its ``agent_ref``) before writing it, and prints the
tracker's ``summary()`` after the loop.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["ROWS_RAN", "write_standin"]

ROWS_RAN = 4

_INIT = '__version__ = "{version}"\n'

_COLLECTION = """
import asyncio
import time

class DispatchLatencyTracker:
    def __init__(self):
        self.samples, self.drained = [], 0

    def record(self, seconds):
        self.samples.append(seconds)

    def record_drained(self):
        self.drained += 1

    def drain_margin(self, configured):
        return configured

    def summary(self):
        return f"tracker: {{len(self.samples)}} recorded, {{self.drained}} drained"


class ServerClient:
    async def post(self, server_name, url_path, **kwargs):
        await asyncio.sleep(0.01)
        row = kwargs["json"]
        if (row["_ng_task_index"], row["_ng_rollout_index"]) == (1, 1):
            raise RuntimeError("503")
        return {{"reward": 1.0, "output": "done"}}


def {perf_name}(result, *, observability_enabled, rollout_latency_ms=None):
    if rollout_latency_ms is not None:
        result["ng_perf"] = {{"total_latency_ms": rollout_latency_ms}}


class RolloutCollectionHelper:
    def _run_examples_with_metadata(self, examples, *, dispatch_budget_s=None, latency_tracker=None):
        client = ServerClient()

        async def one(row):
            if row["_ng_task_index"] == 2:
                latency_tracker.record_drained()
                drained = {{"_ng_failure_class": "cancelled", "_ng_dispatch_drained": True}}
                drained["_ng_no_persist"] = True
                return row, drained, None
            started = time.monotonic()
            try:
                result = await client.post(server_name="agent", url_path="/run", json=row)
            except RuntimeError:
                return row, {{"_ng_failure_class": "agent_request_failed"}}, None
            latency_tracker.record(time.monotonic() - started)
            return row, result, (time.monotonic() - started) * 1000

        return [one(row) for row in examples]

    async def run_from_config(self, config):
        tracker = DispatchLatencyTracker()
        rows = [{{"_ng_task_index": t, "_ng_rollout_index": r}} for t in range(3) for r in range(2)]
        with open(config.output_jsonl_fpath, "w") as out:
            dispatched = self._run_examples_with_metadata(rows, latency_tracker=tracker)
            for future in asyncio.as_completed(dispatched):
                row, result, latency_ms = await future
                result.update(row)
                {perf_name}(result, observability_enabled=True, rollout_latency_ms=latency_ms)
                result["agent_ref"] = {{"name": "edited_after_ng_perf"}}
                if not result.get("_ng_no_persist"):
                    out.write(repr(sorted(result)) + "\\n")
        print(tracker.summary())
"""

_JOB = """
import asyncio
import sys
from types import SimpleNamespace

from nemo_gym.rollout_collection import RolloutCollectionHelper

output = sys.argv[1].rpartition("=")[2]  # a path, or NeMo Gym's override ++output_jsonl_fpath=PATH
config = SimpleNamespace(output_jsonl_fpath=output, dispatch_budget_s=600.0, drain_margin_s=None)
asyncio.run(RolloutCollectionHelper().run_from_config(config))
print("patched:", hasattr(RolloutCollectionHelper.run_from_config, "__wrapped__"))
"""


def write_standin(root: Path, *, version: str = "0.7.0", perf_name: str = "_attach_ng_perf") -> Path:
    """Write the stand-in package and ``job.py`` into ``root`` (for ``PYTHONPATH``); returns ``job.py``."""
    package = root / "nemo_gym"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(_INIT.format(version=version))
    (package / "rollout_collection.py").write_text(_COLLECTION.format(perf_name=perf_name))
    (root / "job.py").write_text(_JOB)
    return root / "job.py"
