"""A journal of completion facts written directly, for the benchmarks that need a big run.

``benchmarks/state.py`` (restart and memory at scale), ``benchmarks/page.py`` and
``benchmarks/timeline.py`` (the served page and timeline) each need a run of up to millions of
digested completions without posting them: generated ~8 KB rows are digested once into
templates, and each fact is a template with a fresh identity and arrival time. The journal is the
service's own (``sidecar.journal``), so ``rollout-sidecar serve`` replays it as it would a real one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from sidecar.demo.synthetic import SyntheticConfig, generate_rows
from sidecar.ingest.engines import default_engines
from sidecar.ingest.events import EventBatch, RunStarted
from sidecar.ingest.facts import derive_fact
from sidecar.ingest.ingestor import Ingestor
from sidecar.journal import (
    CompletedFact,
    Journal,
    JournalEvent,
    RunStartedFact,
    SnapshotStore,
    encode_fact,
)

__all__ = [
    "REPEATS_PER_TASK",
    "RUN_ID",
    "T0",
    "completed_facts",
    "completed_templates",
    "replay_and_snapshot",
    "template_rows",
    "write_journal",
]

REPEATS_PER_TASK = 4
#: The run every journal here holds.
RUN_ID = "big"
#: Arrival time (unix seconds) of the first completion; the run starts a second before.
T0 = 1.8e9


def template_rows() -> list[dict[str, Any]]:
    """400 distinct generated rows of ~8 KB (two model calls of 1,200-byte payloads)."""
    config = SyntheticConfig(
        num_tasks=400, repeats_per_task=1, model_calls_per_rollout=2, payload_bytes_per_call=1200
    )
    return list(generate_rows(config, 1))


def completed_templates(rows: list[dict[str, Any]]) -> list[CompletedFact]:
    """Each row's completion fact, digested as ingest digests it."""
    engines = default_engines()
    settings = ("rollouts.jsonl", frozenset[str]())
    out = []
    for index, row in enumerate(rows):
        row = {**row, "_ng_task_index": 0, "_ng_rollout_index": 0}
        event = EventBatch.validate_python([{"kind": "completed", "seconds": 1.0 + index, "row": row}])[0]
        fact = derive_fact(event, received_at=0.0, engines=engines, settings=settings)
        assert isinstance(fact, CompletedFact) and fact.digest is not None
        out.append(fact)
    return out


def completed_facts(
    templates: list[CompletedFact], count: int, *, step_s: float = 0.01
) -> Iterator[tuple[str, bytes]]:
    """``(key, encoded fact)`` of ``count`` completions, ``REPEATS_PER_TASK`` per task, happening
    and arriving ``step_s`` apart from :data:`T0`, each a template with the identity its index gives."""
    for index in range(count):
        task, rollout = divmod(index, REPEATS_PER_TASK)
        template = templates[index % len(templates)]
        digest = list(template.digest or ())
        digest[0], digest[1], digest[3] = task, rollout, f"{task}-{rollout}"
        fact = template._replace(
            received_at=T0 + index * step_s,
            at=T0 + index * step_s,  # as a dispatcher stamps it: the timeline and rates go by it
            seconds=1.0 + (index * 7919) % 3600,
            task=task,
            rollout=rollout,
            digest=tuple(digest),
        )
        yield f"bench|completed|{index}", encode_fact(fact)


async def write_journal(
    path: Path,
    templates: list[CompletedFact],
    count: int,
    *,
    step_s: float = 0.01,
    dispatch_budget_s: float | None = None,
) -> None:
    """A journal at ``path`` of run :data:`RUN_ID`: its start (a plan of every task) and
    :func:`completed_facts`, appended 20,000 at a time."""
    journal = Journal(path, max_batch=20_000)
    await journal.open()
    plan = {str(task): REPEATS_PER_TASK for task in range(-(-count // REPEATS_PER_TASK))}
    head = RunStarted(kind="run_started", plan=plan, dispatch_budget_s=dispatch_budget_s)
    start = encode_fact(RunStartedFact(T0 - 1, 0, orjson.dumps(head.model_dump(exclude_none=True)), None))
    await journal.append(
        [JournalEvent(run_id=RUN_ID, kind="run_started", key="bench|run_started", payload=start)]
    )
    chunk: list[JournalEvent] = []
    for key, payload in completed_facts(templates, count, step_s=step_s):
        chunk.append(JournalEvent(run_id=RUN_ID, kind="completed", key=key, payload=payload))
        if len(chunk) == 20_000:
            await journal.append(chunk)
            chunk = []
    if chunk:
        await journal.append(chunk)
    await journal.close()


async def replay_and_snapshot(path: Path) -> tuple[float, float, int]:
    """Replay the journal at ``path`` in-process and snapshot it (compacting the journal):
    ``(replay seconds, snapshot seconds, snapshot directory bytes)``."""
    journal = Journal(path)
    await journal.open()
    store = SnapshotStore.beside(path, keep=1)
    ingestor = Ingestor(journal, default_engines(), snapshots=store)
    began = time.perf_counter()
    await asyncio.to_thread(ingestor.replay)
    replay_s = time.perf_counter() - began
    began = time.perf_counter()
    await ingestor.snapshot()
    snapshot_s = time.perf_counter() - began
    await journal.close()
    directory = store.directory
    return replay_s, snapshot_s, sum(p.stat().st_size for p in directory.glob("*") if p.is_file())
