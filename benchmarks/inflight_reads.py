"""What one read of the in-flight registry costs on the event loop, against a baseline build's.

One command::

    .venv/bin/python benchmarks/inflight_reads.py                    # 200,000 in flight, vs main
    .venv/bin/python benchmarks/inflight_reads.py --inflight 50000 --baseline-ref HEAD~3 --repeats 9

Both registries (``sidecar/state/inflight.py`` of this tree and of ``--baseline-ref``, read with
``git show``) are filled with the same ``--inflight`` rollouts (starts 10 ms apart, one in
ten heartbeating) and then timed, interleaved, ``--repeats`` times each (median CPU time, ms): the
``/inflight`` body (``as_dict``, 20 oldest), the view a scrape or an OTLP collection reads
(``view``), one straggler/stall evaluation with a threshold that flags nothing new, and, per
event, a ``started`` + its end (the ingest cost the ordering adds; µs). Each of these runs on
the event loop: its time is how long ``/drain_margin`` waits behind it.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

T0 = 1.0e9


def _module(ref: str | None, tmp: Path) -> ModuleType:
    """``sidecar.state.inflight`` of this tree (``None``) or of commit ``ref``."""
    if ref is None:
        import sidecar.state.inflight

        return sidecar.state.inflight
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:sidecar/state/inflight.py"], check=True, capture_output=True
    ).stdout
    path = tmp / f"inflight_{ref.replace('/', '_').replace('~', '_')}.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


def _filled(module: ModuleType, count: int) -> Any:
    registry = module.InflightRegistry(module.InflightRules(max_tracked=count + 10_000))
    for index in range(count):
        registry.started((index, 0), 0, T0 + index * 0.01)
        if index % 10 == 0:
            registry.heartbeat((index, 0), 0, T0 + index * 0.01 + 1.0)
    return registry


def _ms(action: Callable[[], object]) -> float:
    began = time.process_time()  # CPU time: what the loop spends, less noisy on a shared machine
    action()
    return (time.process_time() - began) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inflight", type=int, default=200_000)
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        builds = {
            f"baseline {args.baseline_ref}": _module(args.baseline_ref, Path(tmp)),
            "this build": _module(None, Path(tmp)),
        }
        registries = {name: _filled(module, args.inflight) for name, module in builds.items()}
        now = T0 + args.inflight * 0.01 + 5.0
        threshold = now - T0 + 1.0  # older than every rollout: nothing straggles
        timings: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.repeats):
            for name, registry in registries.items():
                for label, action in (
                    ("/inflight body (as_dict, 20 oldest)", lambda r=registry: r.as_dict(now, threshold, 20)),
                    ("scrape / OTLP view", lambda r=registry: r.view(now, threshold)),
                    ("evaluation (nothing new)", lambda r=registry: r.evaluate(now, threshold)),
                ):
                    timings.setdefault((name, label), []).append(_ms(action))
                extra = 20_000
                began = time.process_time()
                for index in range(extra):
                    key = (10**9 + index, 0)
                    registry.started(key, 0, now + index)
                    registry.ended(key, None)
                per_event_us = (time.process_time() - began) / extra * 1e6
                timings.setdefault((name, "started + ended (µs per pair)"), []).append(per_event_us)
    labels = dict.fromkeys(label for _, label in timings)
    print(f"## in-flight registry at {args.inflight:,} rollouts, median of {args.repeats} (ms unless noted)")
    for label in labels:
        base = statistics.median(timings[(next(iter(builds)), label)])
        line = []
        for name in builds:
            value = statistics.median(timings[(name, label)])
            line.append(f"{name} {value:10.3f}")
        ours = statistics.median(timings[("this build", label)])
        print(f"  {label:<38} {' | '.join(line)} | ratio {base / ours if ours else float('inf'):8.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
