"""Multi-shard run directories whose cross-shard semantics a wrong map or reduce would break.

Shared by the ``--glob``, split and Ray tests: blank lines, CRLF, U+2028 inside strings,
invalid UTF-8, records without ``_ng_task_index`` (identity from the global ordinal),
unreadable lines (identity from the input index and line number), identities duplicated
across shards, and tasks whose repeats sit in several shards.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

GOOD_CALL = {
    "model_call_id": "c1",
    "response": {"output_text": "ok"},
    "response_metadata": {
        "model_ref": {"type": "responses_api_models", "name": "policy"},
        "status_code": 200,
    },
    "token_stats": {"prompt_tokens": 10, "completion_tokens": 5},
}


def record(task: object, rollout: object, answer: str = "a", status: int = 200, pad: int = 0) -> bytes:
    """One rollouts line (no newline) with a one-turn trajectory; ``pad`` adds payload bytes."""
    call = dict(GOOD_CALL, response_metadata=dict(GOOD_CALL["response_metadata"], status_code=status))  # type: ignore[arg-type]
    turn = {
        "invocation_id": "main",
        "task_id": "t",
        "rollout_id": "r",
        "turn_no": 1,
        "timestamp": 1.0,
        "step_count": 1,
        "answer": answer,
        "model_calls": [{"model_call_id": "c1"}],
    }
    row: dict[str, object] = {
        "response": {"usage": {"input_tokens": 10, "output_tokens": 5}, "pad": "x" * pad}
    }
    if task is not None:
        row["_ng_task_index"] = task
    row["_ng_rollout_index"] = rollout
    row["ng_trajectory"] = {"task_id": "t", "rollout_id": "r", "turns": [turn], "model_calls": [call]}
    return orjson.dumps(row)


ODD_LINES = (
    b"",
    b"  \t",
    b"{torn",
    b"[1]",
    b'{"_ng_task_index": null}',
    b'{"_ng_rollout_index": 1}',
    b'{"_ng_task_index": 3, "_ng_rollout_index": 0, "note": "\xff\xfe not utf-8"}',
    b'{"_ng_task_index": 5, "_ng_rollout_index": 9, "note": "line\xe2\x80\xa8separator"}',
)


def write_shards(
    run_dir: Path, shards: int = 3, tasks: int = 12, repeats: int = 3, seed: int = 7, pad: int = 0
) -> list[Path]:
    """Write ``shards`` rollouts files (plus the side files ``--glob`` must skip); return them sorted.

    Each task's repeats are dealt over the shards, so task-level checks see rows from several
    files; some identities are written twice in different shards; odd lines are sprinkled in.
    """
    rng = random.Random(seed)
    lines: list[list[bytes]] = [[] for _ in range(shards)]
    for task in range(tasks):
        for rollout in range(repeats):
            shard = (task + rollout) % shards
            answer = "" if (task * 7 + rollout) % 5 == 0 else "a"
            status = 500 if task % 4 == 3 else 200
            lines[shard].append(record(task, rollout, answer, status, pad=rng.randrange(pad + 1)))
    for shard in range(shards):
        lines[shard].append(record(shard, 0))  # duplicate identities across shards
        lines[shard].append(record(None, shard))  # identity from the global ordinal
        for odd in ODD_LINES:
            lines[shard].insert(rng.randrange(len(lines[shard]) + 1), odd)
    paths = []
    run_dir.mkdir(parents=True, exist_ok=True)
    for shard, shard_lines in enumerate(lines):
        path = run_dir / f"rollouts-rs{shard}-chunk{shard % 2}.jsonl"
        separator = b"\r\n" if shard == 1 else b"\n"
        tail = b"" if shard == 2 else separator  # one shard ends without a newline
        path.write_bytes(separator.join(shard_lines) + tail)
        (run_dir / f"rollouts-rs{shard}-chunk{shard % 2}_failures.jsonl").write_bytes(b"{not rollouts}\n")
        (run_dir / f"rollouts-rs{shard}-chunk{shard % 2}_materialized_inputs.jsonl").write_bytes(b"[]\n")
        paths.append(path)
    return sorted(paths, key=str)
