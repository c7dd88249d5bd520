"""Client import cost: ``import dispatcher_client`` in a fresh interpreter vs its own dependencies.

One command: ``.venv/bin/python benchmarks/client_import.py [--runs N]``. Each run starts a new
interpreter for ``import httpx, pydantic, orjson`` (the baseline: what the client needs anyway)
and one for ``import dispatcher_client``, alternating; it prints the median wall time of each,
their ratio, the import self time of this project's modules, and which of them the client
import loaded (only the contract models, the perf core and the wire contract: no server, no
batch health check).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import orjson

BASELINE = "import httpx, pydantic, orjson"
CLIENT = "import dispatcher_client"


def _wall(statement: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], check=True)
    return time.perf_counter() - started


def _modules(statement: str) -> list[str]:
    code = (
        f"import sys\n{statement}\nimport orjson\nsys.stdout.buffer.write(orjson.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True).stdout
    return [
        name for name in orjson.loads(out) if name.split(".")[0] in ("health", "sidecar", "dispatcher_client")
    ]


def _own_import_ms(statement: str) -> float:
    """Self time (``-X importtime``) summed over this project's modules: less noisy than wall."""
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement], check=True, capture_output=True, text=True
    ).stderr
    total_us = 0
    for line in err.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        own, _, name = (part.strip() for part in line[len("import time:") :].split("|"))
        if own.isdigit() and name.split(".")[0] in ("health", "sidecar", "dispatcher_client"):
            total_us += int(own)
    return total_us / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    _wall(CLIENT)  # warm the file cache and the bytecode
    base, client = [], []
    for _ in range(args.runs):
        base.append(_wall(BASELINE))
        client.append(_wall(CLIENT))
    base_s, client_s = statistics.median(base), statistics.median(client)
    print(f"interpreter + {BASELINE!r}: {base_s * 1000:.0f} ms (median of {args.runs})")
    print(f"interpreter + {CLIENT!r}: {client_s * 1000:.0f} ms")
    print(f"ratio: {client_s / base_s:.2f}x; the client's own share: {(client_s - base_s) * 1000:.0f} ms")
    own = statistics.median(_own_import_ms(CLIENT) for _ in range(args.runs))
    print(f"self time of this project's modules (-X importtime, median): {own:.0f} ms")
    loaded = _modules(CLIENT)
    shown = ", ".join(name for name in loaded if not name.startswith("health.contract._"))
    print(f"project modules loaded ({len(loaded)}): {shown}")


if __name__ == "__main__":
    main()
