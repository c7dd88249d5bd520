"""Validation cost of ``AgentInvocation.conversation``: µs per conversation of 20 typical items.

    .venv/bin/python benchmarks/conversation_validation.py [--runs 7] [--loops 300]

Measures ``TypeAdapter(Conversation)`` (what ``AgentInvocation.conversation`` uses) and
``TypeAdapter(list[ConversationItem])`` on a realistic agent conversation (system/user messages,
assistant output messages, reasoning, function calls and outputs): validation alone (what the health
check does: it never materializes the dump) and validation + JSON dump. Baselines in the same run: the
full model union without the fast path (``ItemModel``), and, if the reference oracle is installed
(``$ORACLE_PY``, ``$ORACLE_NGREF``), NeMo Gym's own item union, timed in a subprocess. Median of runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pydantic import TypeAdapter

from health.contract.conversation import Conversation, ConversationItem, ItemModel


def conversation() -> list[dict[str, Any]]:
    """20 items shaped like a tool-using agent's turn history."""
    items: list[dict[str, Any]] = [
        {"type": "message", "role": "system", "content": "You are a careful assistant. Use the tools."},
        {"role": "user", "content": "Find the population of Paris and compute its square root."},
    ]
    for step in range(4):
        items += [
            {"type": "reasoning", "id": f"rs_{step}", "summary": [{"type": "summary_text", "text": "Plan."}]},
            {"type": "function_call", "call_id": f"call_{step}", "name": "search", "id": f"fc_{step}",
             "arguments": json.dumps({"query": "population of Paris", "page": step}), "status": "completed"},
            {"type": "function_call_output", "call_id": f"call_{step}", "output": "2,102,650 people."},
            {"type": "message", "role": "assistant", "id": f"msg_{step}", "status": "completed",
             "content": [{"type": "output_text", "text": "Checking the next source.", "annotations": []}]},
        ]  # fmt: skip
    items += [
        {"role": "user", "content": [{"type": "input_text", "text": "Thanks, and the square root?"}]},
        {"type": "message", "role": "assistant", "id": "msg_final", "status": "completed",
         "content": [{"type": "output_text", "text": "About 1450.", "annotations": []}]},
    ]  # fmt: skip
    assert len(items) == 20
    return items


def _one_run(adapter: TypeAdapter[Any], items: list[dict[str, Any]], loops: int) -> tuple[float, float]:
    start = time.perf_counter()
    for _ in range(loops):
        adapter.validate_python(items)
    validate = (time.perf_counter() - start) / loops * 1e6
    start = time.perf_counter()
    for _ in range(loops):
        adapter.dump_python(adapter.validate_python(items), mode="json")
    return validate, (time.perf_counter() - start) / loops * 1e6


_ORACLE_TIMER = r"""
import json, sys, time, warnings
warnings.simplefilter("ignore")
from nemo_gym.openai_utils import NeMoGymResponseInputItem
from pydantic import TypeAdapter
ta = TypeAdapter(list[NeMoGymResponseInputItem])
items, loops = json.loads(sys.stdin.readline())
for _ in sys.stdin:
    start = time.perf_counter()
    for _ in range(loops):
        ta.validate_python(items)
    validate = (time.perf_counter() - start) / loops * 1e6
    start = time.perf_counter()
    for _ in range(loops):
        ta.dump_python(ta.validate_python(items), mode="json")
    both = (time.perf_counter() - start) / loops * 1e6
    print(json.dumps([validate, both]), flush=True)
"""


class _Oracle:
    """The reference's item union timed in its own interpreter, one run per request (interleaved)."""

    def __init__(self, items: list[dict[str, Any]], loops: int) -> None:
        python, ngref = os.environ["ORACLE_PY"], os.environ["ORACLE_NGREF"]
        self._proc = subprocess.Popen(
            [python, "-c", _ORACLE_TIMER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=ngref),
        )  # fmt: skip
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps([items, loops]) + "\n")

    def run(self) -> tuple[float, float]:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write("go\n")
        self._proc.stdin.flush()
        validate, both = json.loads(self._proc.stdout.readline())
        return float(validate), float(both)

    def close(self) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        self._proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--loops", type=int, default=300)
    args = parser.parse_args()
    items = conversation()
    runners: dict[str, Any] = {
        "ours: Conversation": TypeAdapter(Conversation),
        "ours: list[ConversationItem]": TypeAdapter(list[ConversationItem]),
        "ours, full union only": TypeAdapter(list[ItemModel]),
    }
    oracle = (
        _Oracle(items, args.loops) if os.environ.get("ORACLE_PY") and os.environ.get("ORACLE_NGREF") else None
    )
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runners}
    if oracle is not None:
        samples["reference (NeMo Gym 0.7.0)"] = []
    for _ in range(args.runs):  # interleaved, so load on the shared machine hits every row alike
        for name, adapter in runners.items():
            samples[name].append(_one_run(adapter, items, args.loops))
        if oracle is not None:
            samples["reference (NeMo Gym 0.7.0)"].append(oracle.run())
    if oracle is not None:
        oracle.close()
    rows = {
        name: (statistics.median(v for v, _ in runs), statistics.median(b for _, b in runs))
        for name, runs in samples.items()
    }
    ours_validate, ours_both = rows["ours: Conversation"]
    print(f"{'µs per 20-item conversation':34s} {'validate':>10s} {'+ dump':>10s}   speed-up of ours")
    for name, (validate, both) in rows.items():
        print(
            f"{name:34s} {validate:10.1f} {both:10.1f}   "
            f"{validate / ours_validate:5.2f}x / {both / ours_both:5.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
