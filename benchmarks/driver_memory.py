"""Benchmark: what each rollout costs in the memory of the process that reduces (the driver).

    .venv/bin/python benchmarks/driver_memory.py [--rollouts 4000]

Takes the first N lines of the corpora ``health_check.py`` generates (``healthy`` and
``faulty``; run that first, or pass ``--generate``), digests them serially, pickles the
compact digests as the pool and Ray tasks send them, then measures with ``tracemalloc`` what
unpickling them and adding them to a ``HealthReducer`` allocates: bytes per rollout held by
the driver, independent of the rows' size.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import sys
import tracemalloc
from itertools import islice
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def per_rollout(path: Path, rollouts: int) -> tuple[int, float]:
    from health.compact import compact_digest
    from health.digest import digest_line
    from health.reduce import HealthReducer

    digests = []
    with path.open("rb") as handle:
        for number, line in enumerate(islice(handle, rollouts), start=1):
            if not line.strip():
                continue
            digest = digest_line(
                line, source_path=str(path), source_index=0, line_number=number, ordinal=len(digests)
            )
            digests.append(compact_digest(digest))
    payload = pickle.dumps(digests, protocol=pickle.HIGHEST_PROTOCOL)
    del digests
    gc.collect()
    tracemalloc.start()
    reducer = HealthReducer()
    reducer.extend(pickle.loads(payload))
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return len(reducer), held / len(reducer)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=4000)
    parser.add_argument("--corpus-rollouts", type=int, default=20_000, help="which cached corpus to read")
    parser.add_argument("--generate", action="store_true", help="generate missing corpora first")
    args = parser.parse_args()
    from health_check import ensure_corpus

    for kind in ("healthy", "faulty"):
        corpus = HERE / "out" / f"health_corpus_{kind}_{args.corpus_rollouts}"
        if args.generate or not (corpus / "rollouts.jsonl").is_file():
            corpus = ensure_corpus(kind, args.corpus_rollouts, regenerate=False)
        count, size = per_rollout(corpus / "rollouts.jsonl", args.rollouts)
        print(f"{kind:8s} {count} rollouts: {size:6.0f} bytes per rollout in the driver's reducer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
