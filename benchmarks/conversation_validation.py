"""Validation cost of ``AgentInvocation.conversation``: µs per conversation of 20 typical items.

    .venv/bin/python benchmarks/conversation_validation.py [--runs 7] [--loops 300]

Measures ``TypeAdapter(list[ConversationItem])`` on a realistic agent conversation (system/user messages,
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

from health.contract.conversation import ConversationItem, ItemModel


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


def per_conversation_us(
    adapter: TypeAdapter[Any], items: list[dict[str, Any]], runs: int, loops: int
) -> tuple[float, float]:
    """Median µs per conversation: (validate, validate + dump)."""
    validate, both = [], []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(loops):
            adapter.validate_python(items)
        validate.append((time.perf_counter() - start) / loops * 1e6)
        start = time.perf_counter()
        for _ in range(loops):
            adapter.dump_python(adapter.validate_python(items), mode="json")
        both.append((time.perf_counter() - start) / loops * 1e6)
    return statistics.median(validate), statistics.median(both)


_ORACLE_TIMER = r"""
import json, statistics, sys, time, warnings
warnings.simplefilter("ignore")
from nemo_gym.openai_utils import NeMoGymResponseInputItem
from pydantic import TypeAdapter
items, runs, loops = json.loads(sys.stdin.read())
ta = TypeAdapter(list[NeMoGymResponseInputItem])
validate, both = [], []
for _ in range(runs):
    start = time.perf_counter()
    for _ in range(loops):
        ta.validate_python(items)
    validate.append((time.perf_counter() - start) / loops * 1e6)
    start = time.perf_counter()
    for _ in range(loops):
        ta.dump_python(ta.validate_python(items), mode="json")
    both.append((time.perf_counter() - start) / loops * 1e6)
print(json.dumps([statistics.median(validate), statistics.median(both)]))
"""


def oracle_us(items: list[dict[str, Any]], runs: int, loops: int) -> tuple[float, float] | None:
    python, ngref = os.environ.get("ORACLE_PY"), os.environ.get("ORACLE_NGREF")
    if not python or not ngref:
        return None
    done = subprocess.run(
        [python, "-c", _ORACLE_TIMER], input=json.dumps([items, runs, loops]), capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=ngref), check=True,
    )  # fmt: skip
    validate, both = json.loads(done.stdout)
    return float(validate), float(both)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--loops", type=int, default=300)
    args = parser.parse_args()
    items = conversation()
    rows = {
        "ours (fast path + routed union)": per_conversation_us(
            TypeAdapter(list[ConversationItem]), items, args.runs, args.loops
        ),
        "ours, full union only": per_conversation_us(
            TypeAdapter(list[ItemModel]), items, args.runs, args.loops
        ),
    }
    reference = oracle_us(items, args.runs, args.loops)
    if reference is not None:
        rows["reference (NeMo Gym 0.7.0)"] = reference
    ours_validate, ours_both = rows["ours (fast path + routed union)"]
    print(f"{'µs per 20-item conversation':34s} {'validate':>10s} {'+ dump':>10s}   speed-up of ours")
    for name, (validate, both) in rows.items():
        print(
            f"{name:34s} {validate:10.1f} {both:10.1f}   "
            f"{validate / ours_validate:5.2f}x / {both / ours_both:5.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
