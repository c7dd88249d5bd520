"""``health.native``: ROLLOUT_SIDECAR_NATIVE=0 turns the native part off at run time, and
``rollout-sidecar --version`` says which vetter this process runs.

Each case starts a fresh interpreter: the switch is read when ``health.json_vet`` and
``health.payload_spans`` are first imported, so it holds for the whole process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from health.json_vet import native_vet

_PROBE = """
import json, orjson
from health import json_vet, payload_spans
from tests.health.fast_path_support import corpus_rows, digest_line_at, fast_path_digest
lines = [orjson.dumps(row) for row in corpus_rows()[:40]]
lines += [line[: len(line) // 2] for line in lines[:5]]
lines += [line.replace(b"{", b"{,", 1) for line in lines[5:10]]
records = [repr(fast_path_digest(line)) + repr(digest_line_at(line)) for line in lines]
print(json.dumps({
    "vetter": json_vet.VETTER,
    "payload_native": payload_spans.NATIVE,
    "lean": payload_spans.LEAN,
    "refused": json_vet.vet(b'{"a":1e400}'),
    "accepted": json_vet.vet(b'{"a":[1,2.5,"x"]}'),
    "records": records,
}))
"""


def _probe(native: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "ROLLOUT_SIDECAR_NATIVE"}
    if native is not None:
        env["ROLLOUT_SIDECAR_NATIVE"] = native
    completed = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True, env=env
    )
    found: dict[str, object] = json.loads(completed.stdout)
    return found


def test_zero_turns_the_native_part_off_and_the_fallbacks_read_the_same_records() -> None:
    off = _probe("0")
    assert (off["vetter"], off["payload_native"], off["lean"]) == ("simdjson", False, False)
    assert (off["refused"], off["accepted"]) == (False, True)
    on = _probe(None)
    # the fast path digests each line alike either way (and defers on the same lines)
    assert on["records"] == off["records"]
    assert not any(record.startswith("None") for record in on["records"][:40])  # type: ignore[index,union-attr]


@pytest.mark.skipif(native_vet is None, reason="health._json_vet is not built (no C compiler at install)")
def test_the_native_part_runs_unless_turned_off() -> None:
    for value in (None, "1", ""):
        found = _probe(value)
        assert (found["vetter"], found["payload_native"]) == ("native", True), value


def test_version_names_the_active_vetter() -> None:
    def version(native: str | None) -> list[str]:
        env = {k: v for k, v in os.environ.items() if k != "ROLLOUT_SIDECAR_NATIVE"}
        if native is not None:
            env["ROLLOUT_SIDECAR_NATIVE"] = native
        completed = subprocess.run(
            [sys.executable, "-m", "sidecar.cli", "--version"],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        return completed.stdout.splitlines()

    off = version("0")
    assert (
        off[1]
        == "JSON vetter: simdjson; payload scan: msgspec (native part turned off by ROLLOUT_SIDECAR_NATIVE=0)"
    )
    on = version(None)
    if native_vet is None:
        assert on[1].startswith("JSON vetter: simdjson; payload scan: msgspec (native part not built")
    else:
        assert on[1].startswith("JSON vetter: native; payload scan: native (native part built (")


def test_a_skipped_build_says_so_in_one_line(tmp_path: Path) -> None:
    """``setup.py`` without a working compiler: the build succeeds without the extensions and
    names what it skipped (``pip install -v .`` shows it; ``--version`` always does)."""
    root = Path(__file__).resolve().parents[2]
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copyfile(root / name, tmp_path / name)
    (tmp_path / "health").mkdir()
    for source in (root / "health").glob("*.[ch]"):
        shutil.copyfile(source, tmp_path / "health" / source.name)
    env = {**os.environ, "CC": str(tmp_path / "no-such-compiler")}
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    said = [line for line in built.stderr.splitlines() if line.startswith("rollout-sidecar: ")]
    assert [line.split(")", 1)[0] for line in said] == [
        "rollout-sidecar: the optional native part (health._json_vet",
        "rollout-sidecar: the optional native part (health._payload_spans",
    ]
    assert "no-such-compiler" in said[0] and "Install a C compiler" in said[0]
    assert not list((tmp_path / "health").glob("*.so"))
