"""Read an offline W&B run back from its ``.wandb`` transaction log.

wandb 0.31 no longer ships the Python ``DataStore`` reader (its Go core writes the log), so this
reads the log's framing as W&B defines it (a 7-byte header ``:W&B`` + magic + version, then
LevelDB-log records in 32 KiB blocks, each checked against its CRC-32) and decodes every record
with W&B's own protobuf classes (``wandb.proto.wandb_internal_pb2.Record``).
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["OfflineRun", "read_records", "read_run"]

_HEADER = struct.Struct("<4sHB")
_BLOCK = 32768
_RECORD_HEADER = 7
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes) -> list[bytes]:
    ident, magic, version = _HEADER.unpack_from(data)
    assert (ident, magic, version) == (b":W&B", 0xBEE1, 0), (ident, magic, version)
    records: list[bytes] = []
    pending = b""
    offset = _HEADER.size
    while offset + _RECORD_HEADER <= len(data):
        left = _BLOCK - offset % _BLOCK
        if left < _RECORD_HEADER:  # block trailer
            offset += left
            continue
        checksum, length, kind = struct.unpack_from("<IHB", data, offset)
        if kind == 0 and length == 0:  # zero padding at the end of a block
            offset += left
            continue
        chunk = data[offset + _RECORD_HEADER : offset + _RECORD_HEADER + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF == checksum, offset
        offset += _RECORD_HEADER + length
        if kind == _FULL:
            records.append(chunk)
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            records.append(pending + chunk)
            pending = b""
    return records


def read_records(path: Path) -> list[Any]:
    """Every record of the log, as ``wandb_internal_pb2.Record`` messages."""
    from wandb.proto import wandb_internal_pb2

    records = []
    for payload in _payloads(path.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        records.append(record)
    return records


def _key(item: Any) -> str:
    return "/".join(item.nested_key) if item.nested_key else str(item.key)


@dataclass
class OfflineRun:
    """What one offline run directory holds: history rows by step, summary, config, artifacts."""

    run_id: str
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    #: ``define_metric`` declarations: metric name or glob -> its step metric.
    step_metrics: dict[str, str] = field(default_factory=dict)
    #: Artifact name -> {file name: bytes} (read from the files the manifest points at).
    artifacts: dict[str, dict[str, bytes]] = field(default_factory=dict)


def _closed(log: Path) -> list[Any] | None:
    try:
        records = read_records(log)
    except (AssertionError, struct.error):  # a record still being written
        return None
    return records if records and records[-1].WhichOneof("record_type") == "exit" else None


def read_run(run_dir: Path, timeout_s: float = 60.0) -> OfflineRun:
    """The records of ``run_dir/run-<id>.wandb`` folded into an :class:`OfflineRun`, once W&B's
    core process has written the run's ``exit`` record (it writes the log after ``finish()``
    returns)."""
    (log,) = run_dir.glob("run-*.wandb")
    deadline = time.monotonic() + timeout_s
    while (records := _closed(log)) is None:
        if time.monotonic() > deadline:
            raise AssertionError(f"{log} has no exit record after {timeout_s} s")
        time.sleep(0.05)
    run = OfflineRun(log.stem.removeprefix("run-"))
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {_key(item): json.loads(item.value_json) for item in record.history.item}
            run.history.append(row)
        elif kind == "summary":
            for item in record.summary.update:
                run.summary[_key(item)] = json.loads(item.value_json)
        elif kind == "config":
            for item in record.config.update:
                run.config[_key(item)] = json.loads(item.value_json)
        elif kind == "metric":
            metric = record.metric
            run.step_metrics[metric.glob_name or metric.name] = metric.step_metric
        elif kind == "artifact":
            files = {}
            for entry in record.artifact.manifest.contents:
                files[entry.path] = Path(entry.local_path).read_bytes()
            run.artifacts[record.artifact.name] = files
    return run
