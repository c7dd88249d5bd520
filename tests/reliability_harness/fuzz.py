"""Bad input: property-based fuzzing of every endpoint of a live service over HTTP.

Hypothesis generates whole requests: event batches built from the real event kinds and field
names with values of any JSON type, arbitrary JSON documents, arbitrary bytes, deep nesting,
bodies past the size cap, odd run ids, query strings, methods and paths. Every response must be
below 500, and every 4xx must carry the JSON error body ``{"error", "field", "detail"}``; bodies
past the cap answer 413, nesting past the limit 400, events for an unknown run 404. Afterwards
the process must still be serving and its log must hold no traceback. (The app publishes no
OpenAPI schema, so schemathesis has nothing to read; the strategies below are its stand-in.)
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sidecar.ingest.events import EVENT_KINDS
from sidecar.wire import RUN_ID_PATTERN

from .sidecar_process import Launch, SidecarProcess

__all__ = ["BODY_CAP", "FuzzResult", "run_fuzz"]

BODY_CAP = 64 * 1024
MAX_DEPTH = 64
KNOWN_RUN = "fuzz-run"
_GET_PATHS = (
    "/v1/runs",
    "/drain_margin",
    "/metrics",
    "/report",
    "/report/quality_summary.json",
    "/report/verdicts",
    "/healthz",
    "/readyz",
)
_FIELDS = (
    "seconds", "latency_ms", "row", "line", "line_number", "task_index", "rollout_index", "attempt",
    "plan", "generation", "dispatch_budget_s", "drain_margin_s", "task_timeout_s", "max_attempts",
    "started_at", "ended_at", "source_path", "ignored_checks", "failure_class", "terminal", "op",
    "source", "seq",
)  # fmt: skip


@dataclass
class FuzzResult:
    requests: int = 0
    by_status: dict[int, int] = field(default_factory=dict)
    not_sendable: int = 0
    """Requests httpx itself refused to encode (illegal header or URL), never sent."""
    violations: list[str] = field(default_factory=list)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_event = st.fixed_dictionaries(
    {"kind": st.sampled_from((*EVENT_KINDS, "bogus", ""))},
    optional={name: _json for name in _FIELDS}
    | {"row": st.dictionaries(st.text(max_size=20), _json, max_size=6)}
    | {"plan": st.dictionaries(st.text(max_size=4), st.integers(-2, 5), max_size=3)}
    | {"materialized_inputs": st.sampled_from(["/nonexistent/inputs.jsonl", "", "relative.jsonl"])},
)


def _path_segment(run_id: str) -> str:
    """``run_id`` percent-encoded as one path segment. ``quote`` leaves ``.`` and ``..`` as they
    are, and a client (httpx here) removes such dot segments from the path, so the request would
    never name the run; their dots are encoded so the run id reaches the route and its check."""
    encoded = urllib.parse.quote(run_id, safe="")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


#: Dot-segment run ids as a client sends them unencoded: the path loses the segment
#: (``/v1/runs/./events`` becomes ``/v1/runs/events``), which names no route.
_DOT_SEGMENT_PATHS = ("/v1/runs/./events", "/v1/runs/../events")


@st.composite
def _request(draw: st.DrawFn) -> dict[str, Any]:
    run_id = draw(
        st.sampled_from([KNOWN_RUN, "never-started"])
        | st.text(min_size=1, max_size=40)
        | st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,140}", fullmatch=True)
    )
    shape = draw(
        st.sampled_from(["events", "events", "events", "json", "bytes", "deep", "oversized", "get", "odd"])
    )
    expect: int | None = None
    if shape == "get":
        path = draw(st.sampled_from(_GET_PATHS))
        params = draw(
            st.dictionaries(
                st.sampled_from(["run_id", "configured", "x"]),
                st.text(max_size=20) | st.just(run_id),
                max_size=3,
            )
        )
        return {"method": "GET", "path": path, "params": params, "content": None, "expect": None}
    if shape == "odd":
        method = draw(st.sampled_from(["PUT", "DELETE", "PATCH", "POST", "GET", "OPTIONS"]))
        path = draw(
            st.sampled_from([*_GET_PATHS, "/v1/runs/x", "/v1", "/", "/v2/runs/x/events"])
            | st.text(max_size=20)
        )
        return {"method": method, "path": "/" + urllib.parse.quote(path.lstrip("/")), "params": {},
                "content": draw(st.binary(max_size=64)), "expect": None}  # fmt: skip
    if shape == "events":
        events = draw(st.lists(_event, max_size=5))
        body: Any = {"events": events} if draw(st.booleans()) else events
        content = json.dumps(body, ensure_ascii=draw(st.booleans())).encode()
    elif shape == "json":
        content = json.dumps(draw(_json)).encode()
    elif shape == "bytes":
        content = draw(st.binary(max_size=200))
    elif shape == "deep":
        depth = draw(st.integers(MAX_DEPTH + 1, 3000))
        opener, closer = draw(st.sampled_from([("[", "]"), ('{"a":', "}")]))
        content = (opener * depth + "1" + closer * depth).encode()
        expect = 400
    else:
        content = b"[" + b" " * (BODY_CAP + draw(st.integers(0, 4096))) + b"]"
        expect = 413
    path = f"/v1/runs/{_path_segment(run_id)}/events"
    if not RUN_ID_PATTERN.fullmatch(run_id):
        expect = 400 if "/" not in run_id else 404  # the run id is checked first; a slash misses the route
    elif shape == "events" and run_id != KNOWN_RUN and events and events[0]["kind"] != "run_started":
        expect = None  # 404 when the batch is valid, else 422: checked below
    return {"method": "POST", "path": path, "params": {}, "content": content, "expect": expect}


def _check(request: dict[str, Any], response: httpx.Response, result: FuzzResult) -> None:
    status = response.status_code
    result.by_status[status] = result.by_status.get(status, 0) + 1
    body_text = str(request["content"])[:80]
    label = f"{request['method']} {request['path'][:80]} params={request['params']} body={body_text}"
    if status >= 500:
        result.violations.append(f"{status} for {label}: {response.text[:200]}")
        return
    expect = request["expect"]
    if expect is not None and status != expect:
        result.violations.append(f"expected {expect}, got {status} for {label}")
    if status >= 400:
        try:
            body = response.json()
        except ValueError:
            result.violations.append(f"{status} without a JSON body for {label}")
            return
        if not isinstance(body, dict) or set(body) != {"error", "field", "detail"} or not body["error"]:
            result.violations.append(f"{status} with body {body!r} for {label}")
        if (
            status == 404
            and request["method"] == "POST"
            and body.get("error") not in ("unknown_run", "not_found")
        ):
            result.violations.append(f"404 with error {body.get('error')!r} for {label}")


def run_fuzz(requests: int, workdir: Path, *, launch: Launch = "exec", seed: int = 0) -> FuzzResult:
    """Send about ``requests`` generated requests to one live service; see the module docstring."""
    result = FuzzResult()
    log = workdir / "fuzz.log"
    proc = SidecarProcess(
        workdir / "fuzz" / "journal.sqlite3",
        log,
        launch=launch,
        extra_args=["--body-cap", str(BODY_CAP), "--max-json-depth", str(MAX_DEPTH)],
    )
    with proc as url, httpx.Client(base_url=url, timeout=30) as client:
        client.post(f"/v1/runs/{KNOWN_RUN}/events", json=[{"kind": "run_started"}]).raise_for_status()

        @settings(
            max_examples=requests,
            deadline=None,
            database=None,
            derandomize=True,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        @given(_request())
        def send(request: dict[str, Any]) -> None:
            try:
                response = client.request(
                    request["method"], request["path"], params=request["params"], content=request["content"]
                )
            except (httpx.LocalProtocolError, httpx.InvalidURL, httpx.UnsupportedProtocol):
                result.not_sendable += 1
                return
            result.requests += 1
            _check(request, response, result)

        send()
        for path in _DOT_SEGMENT_PATHS:  # fixed requests: checked, not counted as generated ones
            request = {"method": "POST", "path": path, "params": {}, "content": b"[]", "expect": 404}
            pinned = FuzzResult()
            _check(request, client.post(path, content=b"[]"), pinned)
            result.violations += pinned.violations
        alive = client.get("/healthz")
        if alive.status_code != 200 or proc.poll() is not None:
            result.violations.append("the service stopped serving after the fuzz")
        unknown = client.get("/report", params={"run_id": "never-started-either"})
        if unknown.status_code != 404:
            result.violations.append(f"GET /report of an unknown run: {unknown.status_code}")
    text = log.read_text(errors="replace")
    for marker in (
        "Traceback",
        '"level": "error"',
        '"level": "critical"',
        "applying a committed event failed",
    ):
        if marker in text:
            line = next(line for line in text.splitlines() if marker in line)
            result.violations.append(f"service log holds {marker!r}: {line[:300]}")
    return result
