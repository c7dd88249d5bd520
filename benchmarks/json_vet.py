"""Benchmark: vetting a JSON document as orjson accepts it, native (``health._json_vet``) vs simdjson.

One command::

    .venv/bin/python benchmarks/json_vet.py                 # 400 batch rows, 5 runs
    .venv/bin/python benchmarks/json_vet.py --rollouts 1000 --repeats 7

Four corpora, generated in memory once: the batch check's rows (``sidecar.demo.synthetic`` defaults,
~72 KB, the ``record_step.py`` corpus), live rows (2 model calls of 2,100 bytes, ~12.5 KiB,
as ``live_profile.py`` sends them), and two 1 MiB documents of long strings: plain ASCII and
mostly non-ASCII text (UTF-8 validated byte sequence by byte sequence). Each run times, by
the process's own CPU time (the machine is shared), interleaved, over every document:

* ``simdjson, wrapped copy``: what the fast path did before the native vetter: ``b"".join``
  of the row between 767 brackets, then a simdjson parse (``health.json_vet.simdjson_vet``,
  the fallback where the extension is not built);
* ``simdjson parse``: the parse alone, unwrapped (no depth bound: not a usable vetter);
* ``native vet``: ``health._json_vet.vet(row, 257)``, in place;
* ``vet, then scan``: what the batch fast path did before ``vet_compact``: ``vet`` and then
  ``health._payload_spans.compact`` (the payload-span copy), two passes over the row;
* ``vet_compact``: ``health._json_vet.vet_compact(row, 257)``, both in one pass;
* ``orjson.loads``: a full parse, for scale.

It prints medians in µs per document and GB/s, and the ratios to the wrapped simdjson pass
and to ``vet, then scan``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import simdjson

from health.json_vet import native_vet, simdjson_vet

try:
    from health._json_vet import vet_compact
    from health._payload_spans import compact
except ImportError:  # not built: main() says so
    pass
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the generator lives with the tests
from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

SEED = 20261202
_DEPTH = 257
"""The batch fast path's bound (``health.fast_path``)."""


def _corpora(rollouts: int) -> dict[str, list[bytes]]:
    faults = FaultRates.mixed(0.02)
    batch = SyntheticConfig(num_tasks=max(1, rollouts // 4), repeats_per_task=4, faults=faults)
    live = SyntheticConfig(
        num_tasks=rollouts, repeats_per_task=1, model_calls_per_rollout=2, payload_bytes_per_call=2100
    )
    words = "the quick brown fox jumps over the lazy dog while the model thinks step by step "
    ascii_doc = orjson.dumps({"items": [{"text": words * 40, "n": n} for n in range(320)]})
    mixed = "Élan vital — 速い茶色の狐が怠惰な犬を飛び越える 🦊🐕 naïve café "
    utf8_doc = orjson.dumps({"items": [{"text": mixed * 40, "n": n} for n in range(190)]})
    return {
        "batch rows": [orjson.dumps(row) for row in generate_rows(batch, SEED)],
        "live rows": [orjson.dumps(row) for row in generate_rows(live, SEED)],
        "ASCII strings 1 MiB": [ascii_doc] * 8,
        "UTF-8 strings 1 MiB": [utf8_doc] * 8,
    }


def cpu_seconds(documents: list[bytes], step: Callable[[bytes], object]) -> float:
    started = time.process_time()
    for document in documents:
        step(document)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if native_vet is None:
        raise SystemExit("health._json_vet is not built (pip install -e . with a C compiler present)")
    native = native_vet
    plain_parser = simdjson.Parser()
    steps: dict[str, Callable[[bytes], object]] = {
        "simdjson, wrapped copy": lambda document: simdjson_vet(document, _DEPTH),
        "simdjson parse": plain_parser.parse,
        "native vet": lambda document: native(document, _DEPTH),
        "vet, then scan": lambda document: native(document, _DEPTH) and compact(document),
        "vet_compact": lambda document: vet_compact(document, _DEPTH),
        "orjson.loads": orjson.loads,
    }
    for name, documents in _corpora(args.rollouts).items():
        accepted = sum(native(document, _DEPTH) for document in documents)
        assert accepted == sum(simdjson_vet(document, _DEPTH) for document in documents), name
        timings: dict[str, list[float]] = {step: [] for step in steps}
        for _ in range(args.repeats):
            for step, run in steps.items():  # interleaved, so load changes hit all of them alike
                timings[step].append(cpu_seconds(documents, run))
        size = sum(map(len, documents))
        print(
            f"{name}: {len(documents)} documents, {size / len(documents) / 1000:.1f} KB each, "
            f"{accepted} vetted, {args.repeats} runs (CPU time, median)"
        )
        baseline = statistics.median(timings["simdjson, wrapped copy"])
        two_passes = statistics.median(timings["vet, then scan"])
        for step, values in timings.items():
            seconds = statistics.median(values)
            print(
                f"  {step:24s} {seconds / len(documents) * 1e6:9.1f} µs/doc {size / seconds / 1e9:6.2f} GB/s"
                f"  {baseline / seconds:5.1f}x the wrapped simdjson pass,"
                f" {two_passes / seconds:5.2f}x vet, then scan"
            )


if __name__ == "__main__":
    main()
