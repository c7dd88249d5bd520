"""Client-named files: ``run_started.materialized_inputs`` pointing anywhere.

A real ``rollout-sidecar serve`` (once without, once with ``--inputs-root``) is asked to derive
plans from files it must not read (``/etc/shadow``, ``/proc/self/environ``, its own journal, a
symlink, a FIFO, a directory, a missing file, a file outside the root, garbage and a file whose
lines do not parse, all with NeMo Gym's file name where the attack needs it). Every refusal
must be the same 422 body, byte for byte (nothing about the path leaks), no run may be created,
and a valid file must still give its plan. Then clients post, all at once, runs naming a file
whose one line is far over the line cap: the service's peak resident memory must grow by less
than the file size.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from tests.reliability_harness.proc_stats import peak_resident_bytes
from tests.reliability_harness.sidecar_process import Launch, SidecarProcess

__all__ = ["InputsResult", "run_inputs"]

NAME = "rollouts_materialized_inputs.jsonl"


@dataclass
class InputsResult:
    refused: int = 0
    distinct_refusal_bodies: int = 0
    accepted_plans: int = 0
    big_line_bytes: int = 0
    big_reads: int = 0
    rss_growth_bytes: int = 0
    violations: list[str] = field(default_factory=list)


def _hostile_paths(tmp: Path, journal: Path) -> list[str]:
    (tmp / "evil").mkdir()
    link = tmp / "evil" / f"link_{NAME}"
    link.symlink_to("/etc/passwd")
    fifo = tmp / "evil" / f"fifo_{NAME}"
    os.mkfifo(fifo)
    (tmp / "evil" / f"dir_{NAME}").mkdir()
    garbage = tmp / "evil" / f"garbage_{NAME}"
    garbage.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n")
    outside = tmp / "evil" / NAME
    outside.write_bytes(b'{"_ng_task_index": 1}\n')
    return [
        "/etc/shadow",
        "/etc/passwd",
        "/proc/self/environ",
        str(journal),
        "/dev/zero",
        str(link),
        str(fifo),
        str(tmp / "evil" / f"dir_{NAME}"),
        str(garbage),
        str(tmp / "evil" / f"missing_{NAME}"),
        str(outside),  # refused only when confined to --inputs-root
    ]


def _probe(url: str, paths: list[str], result: InputsResult, expect_outside_refused: bool) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        bodies: set[bytes] = set()
        for number, path in enumerate(paths):
            response = client.post(
                f"/v1/runs/probe-{number}/events", json=[{"kind": "run_started", "materialized_inputs": path}]
            )
            outside = path.endswith(f"/evil/{NAME}")
            if outside and not expect_outside_refused:
                if response.status_code != 200:
                    result.violations.append(f"{path}: a valid file answered {response.status_code}")
                continue
            if response.status_code != 422:
                result.violations.append(f"{path}: answered {response.status_code}, not 422")
                continue
            result.refused += 1
            bodies.add(response.content)
        result.distinct_refusal_bodies = max(result.distinct_refusal_bodies, len(bodies))
        if len(bodies) > 1:
            result.violations.append(f"refusals differ: {sorted(bodies)[:3]}")
        runs = {run["run_id"] for run in client.get("/v1/runs").json()["runs"]}
        leaked = sorted(run for run in runs if run != f"probe-{len(paths) - 1}")
        if leaked:
            result.violations.append(f"refused inputs created runs {leaked}")


def _accepts(url: str, path: Path, result: InputsResult) -> None:
    response = httpx.post(
        f"{url}/v1/runs/good/events",
        json=[{"kind": "run_started", "materialized_inputs": str(path)}],
        timeout=30,
    )
    report = httpx.get(f"{url}/report", params={"run_id": "good"}, timeout=30)
    if response.status_code != 200 or report.json()["plan_tasks"] != 3:
        result.violations.append(
            f"a valid inputs file answered {response.status_code}: {response.text[:200]}"
        )
    else:
        result.accepted_plans += 1


def run_inputs(
    workdir: Path,
    *,
    launch: Launch = "exec",
    big_line_bytes: int = 32 << 20,
    readers: int = 6,
    line_cap: str = "4M",
) -> InputsResult:
    """See the module docstring; ``big_line_bytes`` is the one line of the over-cap file."""
    result = InputsResult(big_line_bytes=big_line_bytes)
    root = workdir / "inputs"
    root.mkdir()
    good = root / NAME
    good.write_bytes(b"".join(orjson.dumps({"_ng_task_index": t}) + b"\n" for t in (0, 0, 1, 2)))
    big = root / f"big_{NAME}"
    with big.open("wb") as handle:
        handle.write(b'{"_ng_task_index": 0, "prompt": "')
        chunk = b"x" * (1 << 20)
        for _ in range(big_line_bytes >> 20):
            handle.write(chunk)
        handle.write(b'"}\n')
    journal = workdir / "journal.sqlite3"
    paths = _hostile_paths(workdir, journal)
    for confined in (False, True):
        args = ["--inputs-root", str(root), "--max-input-line", line_cap] if confined else []
        sidecar = SidecarProcess(
            workdir / f"journal-{confined}.sqlite3" if confined else journal,
            workdir / "sidecar.log",
            launch=launch,
            extra_args=args,
        )
        url = sidecar.start()
        try:
            _probe(url, paths, result, expect_outside_refused=confined)
            _accepts(url, good, result)
            if confined:
                assert sidecar.pid is not None
                _big_reads(url, good, readers, result, expect=200)  # warm: threads, arenas
                before = peak_resident_bytes(sidecar.pid)
                _big_reads(url, big, readers, result)
                result.rss_growth_bytes = peak_resident_bytes(sidecar.pid) - before
                if result.rss_growth_bytes >= big_line_bytes:
                    result.violations.append(
                        f"{readers} reads of a {big_line_bytes}-byte line grew the service by "
                        f"{result.rss_growth_bytes} bytes"
                    )
        finally:
            sidecar.stop()
    return result


def _big_reads(url: str, big: Path, readers: int, result: InputsResult, expect: int = 422) -> None:
    statuses: list[int] = []

    def read(number: int) -> None:
        response = httpx.post(
            f"{url}/v1/runs/{big.name[:40]}-{number}/events",
            json=[{"kind": "run_started", "materialized_inputs": str(big)}],
            timeout=120,
        )
        statuses.append(response.status_code)

    threads = [threading.Thread(target=read, args=(n,)) for n in range(readers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.big_reads = len(statuses)
    if statuses != [expect] * readers:
        result.violations.append(f"over-cap line reads answered {statuses}")
