"""Run page benchmark: the page and its JSON for a small and a 1M-rollout run, time and bytes.

One command: ``.venv/bin/python benchmarks/page.py`` (``--sizes`` for other counts). For each
size a journal of that many completion facts is written (``benchmarks/fact_journal.py``: generated
rows with fresh identities, spread over ``--span-hours`` whatever the count, so a small and a big
run both fill their timeline),
replayed and snapshotted, and ``rollout-sidecar serve`` started on it. Then every URL the page
loads (``/runs/{id}``, ``/v1/runs/{id}/page``, ``/v1/runs/{id}/timeline``, the static assets) is
fetched ``--requests`` times over one keep-alive connection, once the run's perf summary is built
(the first request and that build are printed apart): median and p99 latency, and the
response's bytes. The first size is the baseline: the ratio columns divide the largest size's
figures by it (the issue's target: well under 100 ms, and the same size at 1M as at 1k).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.fact_journal import (  # noqa: E402
    RUN_ID,
    completed_templates,
    replay_and_snapshot,
    template_rows,
    write_journal,
)
from benchmarks.state import serve  # noqa: E402

RUN = RUN_ID
URLS = (
    f"/runs/{RUN}",
    f"/v1/runs/{RUN}/page",
    f"/v1/runs/{RUN}/timeline",
    "/static/page.js",
    "/static/page.css",
    "/static/uPlot.iife.min.js",
    "/static/uPlot.min.css",
)


def _cold(url: str) -> tuple[float, float]:
    """Milliseconds of the first ``/page`` request (it starts the perf summary's build and waits
    at most 0.25 s for it), and seconds until the summary is there (polled as the page does)."""
    began = time.perf_counter()
    response = httpx.get(f"{url}/v1/runs/{RUN}/page", timeout=120)
    assert response.status_code == 200, response.text[:200]
    first = (time.perf_counter() - began) * 1000
    while response.json()["perf_pending"]:
        time.sleep(0.5)
        response = httpx.get(f"{url}/v1/runs/{RUN}/page", timeout=120)
    return first, time.perf_counter() - began


def _measure(url: str, requests: int) -> dict[str, tuple[float, float, int]]:
    """Per path: (median ms, p99 ms, bytes) over ``requests`` fetches after one warm-up."""
    out: dict[str, tuple[float, float, int]] = {}
    with httpx.Client(base_url=url, timeout=30) as client:
        for path in URLS:
            response = client.get(path)
            assert response.status_code == 200, (path, response.status_code, response.text[:200])
            took: list[float] = []
            for _ in range(requests):
                began = time.perf_counter()
                response = client.get(path)
                took.append((time.perf_counter() - began) * 1000)
            took.sort()
            p99 = took[min(len(took) - 1, int(len(took) * 0.99))]
            out[path] = (statistics.median(took), p99, len(response.content))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,1000000", help="comma-separated rollout counts")
    parser.add_argument("--requests", type=int, default=200, help="fetches per URL (default 200)")
    parser.add_argument("--span-hours", type=float, default=8.0, help="run length, any size (default 8)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    print(f"cpus {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}")
    templates = completed_templates(template_rows()[:200])
    results: dict[int, dict[str, tuple[float, float, int]]] = {}
    with tempfile.TemporaryDirectory() as name:
        for count in sizes:
            journal = Path(name) / f"page-{count}" / "journal.sqlite3"
            began = time.perf_counter()
            asyncio.run(write_journal(journal, templates, count, step_s=args.span_hours * 3600 / count))
            asyncio.run(replay_and_snapshot(journal))
            prepared = time.perf_counter() - began
            with serve(journal) as (url, _pid):
                cold, built = _cold(url)
                results[count] = _measure(url, args.requests)
            print(f"\n## {count:,} rollouts (journal written and replayed in {prepared:.1f} s)")
            print(f"first /page request {cold:.1f} ms; perf summary built in the background in {built:.1f} s")
            print(f"{'path':<34} {'median ms':>10} {'p99 ms':>9} {'bytes':>10}")
            for path, (median, p99, size) in results[count].items():
                print(f"{path:<34} {median:>10.2f} {p99:>9.2f} {size:>10,}")
    small, large = sizes[0], sizes[-1]
    if small != large:
        print(f"\n## {large:,} vs {small:,} rollouts (ratio of medians; bytes)")
        for path in URLS:
            a, b = results[small][path], results[large][path]
            print(f"{path:<34} time x{b[0] / a[0]:.2f}   bytes {a[2]:,} -> {b[2]:,} (x{b[2] / a[2]:.3f})")
    page_bytes = sum(results[large][path][2] for path in URLS if not path.startswith("/v1/"))
    print(f"\npage (HTML + scripts + styles, uncompressed): {page_bytes:,} bytes")
    print("[target: every path well under 100 ms at 1M rollouts; the same bytes at 1M as at 1k]")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
