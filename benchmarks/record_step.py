"""Benchmark: the health pipeline's per-record step (``health.digest.digest_line``), µs per row.

One command::

    .venv/bin/python benchmarks/record_step.py               # 1,000 rollouts, 5 runs
    .venv/bin/python benchmarks/record_step.py --rollouts 4000 --repeats 3

Rows come from ``sidecar.demo.synthetic`` (multi-turn agents, subagents, ~8 KB per model call,
a few faults), generated in memory once. Each run times, by the process's own CPU time (the
machine is shared), over every row:

* ``parse floor``: ``orjson.loads`` alone, the cost no implementation can avoid;
* ``validate+dump baseline``: parse, then the contract's ``canonical_trajectory`` (validate and
  ``model_dump(mode="json")``), the work the reference does before any check runs;
* ``full path``: the per-record step as it runs for any line: orjson parse, identity, pydantic
  validation, depth guard, evidence, the checks, the digest;
* ``digest_line``: the step's digest: the fast path (simdjson validation, strict msgspec
  decode with the payloads left raw, ``health.fast_path``) for plainly valid records, the full
  path for the rest;
* ``runner step (packed)``: the step as a batch worker runs it, ``digest_line_compact``, the
  same digest in its compact form, packed without the pydantic digest (run against a build
  without it, ``digest_line_placed`` + ``compact_digest``).

It prints the medians and the ratios of ``digest_line`` to the others, in the same run.

``--stages`` then splits ``digest_line`` into its stages, each timed alone over the rows that
reach it (µs per row of the whole corpus, so the stages add up to about ``digest_line``): the
native vet and its lean copy (``health._json_vet.vet_lean``; the simdjson validation on a build
without it), the strict msgspec decode of that copy, the contract's cross-field rules and the
conversation check, then evidence + checks + digest, the compact form the workers send (and
both at once, packed, as the runner does), the definite-rejection decode
(``health.rejection``) of the rows the strict decode refuses and the digest of those it proves
invalid, and the full path of the rows left.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import orjson

import health.digest
import health.strict_schema
from health import fast_path, payload_spans
from health.compact import CompactDigest, compact_digest
from health.contract import canonical_trajectory
from health.digest import _digest_everyday, _digest_parsed, _digest_rejected, digest_line
from health.parse import parse_line
from health.payload_spans import NATIVE, decode_strict_skipping_payloads
from health.rejection import read_rejected_record
from health.strict_schema import StrictRecord, contract_rules_hold, decode_strict
from sidecar.demo.synthetic import FaultRates, SyntheticConfig, generate_rows

_VETTED_DEPTH = 257
"""The depth the fast path vets a line to."""

SEED = 20261202
_everyday_walked = getattr(health.digest, "_everyday_walked", None)
_DIGEST_STAGE = "evidence+checks+digest"
_COMPACT_STAGE = "compact digest"
_PACKED_STAGE = "evidence+checks, packed"


def _cpu_us_per_row(rows: list[bytes], step: Callable[[int, bytes], object]) -> float:
    started = time.process_time()
    for position, line in enumerate(rows):
        step(position, line)
    return (time.process_time() - started) / len(rows) * 1e6


def _parse(position: int, line: bytes) -> object:
    return orjson.loads(line)


def _validate_and_dump(position: int, line: bytes) -> object:
    record = orjson.loads(line)
    return canonical_trajectory(record.get("ng_trajectory"))


def _full_path(position: int, line: bytes) -> object:
    record, error = parse_line(line)
    location = ("rollouts.jsonl", 0, position + 1, position)
    return _digest_parsed(record, error, location, frozenset(), len(line), None)


def _digest(position: int, line: bytes) -> object:
    return digest_line(
        line, source_path="rollouts.jsonl", source_index=0, line_number=position + 1, ordinal=position
    )


_digest_line_compact = getattr(health.digest, "digest_line_compact", None)


def _runner_step(position: int, line: bytes) -> object:
    """What a batch worker runs per line: the compact digest (on a build without
    ``digest_line_compact``, e.g. a baseline run with this script, ``digest_line_placed`` and
    ``compact_digest``, which is what its runner runs)."""
    if _digest_line_compact is not None:
        return _digest_line_compact(
            line, source_path="rollouts.jsonl", source_index=0, line_number=position + 1, ordinal=position
        )
    digest, _ = health.digest.digest_line_placed(
        line, source_path="rollouts.jsonl", source_index=0, line_number=position + 1, ordinal=position
    )
    return compact_digest(digest)


def _pack_everyday(
    found: fast_path.EverydayRecord, location: tuple[str, int, int, int]
) -> CompactDigest | None:
    """The fast path's record walked and packed straight into its compact form, as
    ``digest_line_compact`` does (only on a build with the walk apart from the digest)."""
    from health.digest_forms import compact_from_walk

    assert _everyday_walked is not None
    walked = _everyday_walked(found, location[3], frozenset())
    if walked is None:
        return None
    return compact_from_walk(walked.identity, walked.evidence, walked.outcome, location[3])


def _vouch(record: StrictRecord) -> bool:
    trajectory = record.ng_trajectory
    if trajectory is None:
        return True
    return contract_rules_hold(trajectory) and fast_path._conversations_vouched(record, trajectory)


def stages(rows: list[bytes], repeats: int) -> None:
    """Time each stage of ``digest_line`` alone, over the rows that reach it; µs per corpus row."""
    location = ("rollouts.jsonl", 0, 1, 0)
    valid = [line for line in rows if fast_path._is_shallow_json_for_orjson(line)]
    vet_lean = getattr(payload_spans, "_vet_lean", None)  # None: a build without the lean copy
    if vet_lean is not None:
        vetting: tuple[str, Callable[[bytes], object]] = (
            "vet + lean copy",
            lambda line: vet_lean(line, _VETTED_DEPTH),
        )
        lean = [found[0] for found in (vet_lean(line, _VETTED_DEPTH) for line in valid) if found]
        decoding: tuple[str, list[bytes], Callable[[bytes], object]] = (
            "strict decode (lean copy)",
            lean,
            health.strict_schema.decode_strict_typed,
        )
    else:
        vetting = ("simdjson validation", fast_path._is_shallow_json_for_orjson)
        decoding = ("strict msgspec decode", valid, decode_strict_skipping_payloads)
    decoded = [record for record in map(decode_strict_skipping_payloads, valid) if record is not None]
    everyday = [found for found in map(fast_path.read_everyday_record, rows) if found is not None]
    digests = [_digest_everyday(found, location, frozenset()) for found in everyday]
    unstrict = [line for line in valid if decode_strict(line) is None]
    rejected = [found for found in map(read_rejected_record, unstrict) if found is not None]
    deferred = [line for line in rows if fast_path.read_stripped_line(line) is None]
    work: dict[str, tuple[list[object], Callable[[object], object]]] = {
        vetting[0]: (list(rows), vetting[1]),  # type: ignore[dict-item]
        decoding[0]: (list(decoding[1]), decoding[2]),  # type: ignore[dict-item]
        "rules + conversation": (list(decoded), _vouch),  # type: ignore[dict-item]
        _DIGEST_STAGE: (
            list(everyday),
            lambda found: _digest_everyday(found, location, frozenset()),  # type: ignore[arg-type]
        ),
        _COMPACT_STAGE: (list(digests), compact_digest),  # type: ignore[dict-item]
        _PACKED_STAGE: (
            list(everyday) if _everyday_walked is not None else [],
            lambda found: _pack_everyday(found, location),  # type: ignore[arg-type]
        ),
        "definite rejection": (list(unstrict), read_rejected_record),  # type: ignore[dict-item]
        "rejected: checks+digest": (
            list(rejected),
            lambda found: _digest_rejected(found, location, frozenset()),  # type: ignore[arg-type]
        ),
        "full path (deferred rows)": (
            list(deferred),
            lambda line: _full_path(0, line),  # type: ignore[arg-type]
        ),
    }
    timings: dict[str, list[float]] = {name: [] for name in work}
    timings["digest_line"] = []
    for _ in range(repeats):
        for name, (items, step) in work.items():
            started = time.process_time()
            for item in items:
                step(item)
            timings[name].append((time.process_time() - started) / len(rows) * 1e6)
        timings["digest_line"].append(_cpu_us_per_row(rows, _digest))
    cut = "payloads cut natively first" if NATIVE else "payload scan not built"
    print(f"stages of digest_line, µs per corpus row ({len(deferred)} of {len(rows)} rows deferred; {cut}):")
    total = 0.0
    medians = {name: statistics.median(values) for name, values in timings.items()}
    for name, value in medians.items():
        if name not in ("digest_line", _PACKED_STAGE):
            total += value
        print(f"  {name:26s} {value:8.1f}")
    print(f"  {'sum of the stages':26s} {total:8.1f}")
    if _everyday_walked is not None:  # the runner packs in one step what the two stages above do
        packed = total - medians[_DIGEST_STAGE] - medians[_COMPACT_STAGE] + medians[_PACKED_STAGE]
        print(f"  {'sum, packed (as the runner)':26s} {packed:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--stages", action="store_true", help="also time each stage of digest_line")
    parser.add_argument(
        "--fault-rate", type=float, default=0.02, help="each synthetic fault kind's rate (default 0.02)"
    )
    args = parser.parse_args()
    config = SyntheticConfig(
        num_tasks=max(1, args.rollouts // 4), repeats_per_task=4, faults=FaultRates.mixed(args.fault_rate)
    )
    rows = [orjson.dumps(row) for row in generate_rows(config, SEED)]
    size = sum(map(len, rows)) / len(rows)
    steps = {
        "parse floor": _parse,
        "validate+dump baseline": _validate_and_dump,
        "full path": _full_path,
        "digest_line": _digest,
        "runner step (packed)": _runner_step,
    }
    timings: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():  # interleaved, so load changes hit all of them alike
            timings[name].append(_cpu_us_per_row(rows, step))
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(f"{len(rows)} rows, {size / 1000:.1f} KB/row, {args.repeats} runs (CPU time, median)")
    for name, value in medians.items():
        print(f"  {name:24s} {value:8.1f} µs/row  ({1e6 / value:,.0f} rows/s per core)")
    digest = medians["digest_line"]
    print(f"digest_line / parse floor: {digest / medians['parse floor']:.2f}x")
    print(f"digest_line / validate+dump baseline: {digest / medians['validate+dump baseline']:.2f}x")
    print(f"digest_line / full path: {digest / medians['full path']:.2f}x")
    if args.stages:
        stages(rows, args.repeats)


if __name__ == "__main__":
    main()
