"""Security: the token guards every mutating endpoint, a public bind needs a token, and a
canary planted in prompts, responses and tool outputs never leaves the service.

The mutating endpoints are read from the app's own route table (every route with a method
other than GET/HEAD), so a route added later is covered without editing this file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from sidecar.http.app import create_app
from sidecar.http.service import Service
from sidecar.http.settings import TOKEN_ENV_VAR, ServiceSettings

from .sidecar_process import Launch, SidecarProcess
from .workload import batch_files, generate_run, report_files

__all__ = ["CANARY", "SecurityResult", "mutating_routes", "plant_canary", "run_security_checks"]

CANARY = "CANARY-5b1e-prompt-response-tool-output"
TOKEN = "reliability-token-9f27c1"
_TEXT_KEYS = frozenset(
    {"text", "content", "output", "instructions", "question", "answer", "message"}
    | {"_ng_failure_message", "_ng_failure_response_body"}
)
_SAFE = frozenset({"GET", "HEAD"})


@dataclass
class SecurityResult:
    mutating_routes: list[str] = field(default_factory=list)
    unauthorized_401: int = 0
    public_binds_refused: int = 0
    canary_rows: int = 0
    canary_strings: int = 0
    outputs_scanned: int = 0
    log_bytes_scanned: int = 0
    violations: list[str] = field(default_factory=list)


def mutating_routes(tmp: Path) -> list[tuple[str, str]]:
    """``(method, path template)`` of every non-GET route of the app."""
    app = create_app(Service(ServiceSettings(journal_path=tmp / "routes.sqlite3")))
    found = []
    for route in app.routes:
        for method in sorted(getattr(route, "methods", None) or ()):
            if method not in _SAFE:
                found.append((method, str(getattr(route, "path", ""))))
    return found


def plant_canary(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the canary appended to every prompt, response and tool-output string."""

    def walk(value: Any, key: str | None, counter: list[int]) -> Any:
        if isinstance(value, dict):
            return {k: walk(v, k, counter) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, key, counter) for v in value]
        if isinstance(value, str) and key in _TEXT_KEYS:
            counter[0] += 1
            return f"{value} {CANARY}"
        return value

    counter = [0]
    planted: dict[str, Any] = walk(row, None, counter)
    planted.setdefault("_canary_count", counter[0])
    return planted


def _auth_cases() -> list[tuple[str, dict[str, str]]]:
    return [
        ("no header", {}),
        ("bare scheme", {"Authorization": "Bearer"}),
        ("wrong token", {"Authorization": "Bearer wrong"}),
        ("token prefix", {"Authorization": f"Bearer {TOKEN[:-1]}"}),
        ("token plus byte", {"Authorization": f"Bearer {TOKEN}x"}),
        ("basic scheme", {"Authorization": f"Basic {TOKEN}"}),
        ("token without scheme", {"Authorization": TOKEN}),
        ("token in query", {}),
    ]


def _check_auth(url: str, routes: list[tuple[str, str]], result: SecurityResult) -> None:
    body = orjson.dumps([{"kind": "run_started"}])
    with httpx.Client(base_url=url, timeout=10) as client:
        for method, template in routes:
            path = re.sub(r"\{[^}]+\}", "sec-run", template)
            for name, headers in _auth_cases():
                target = f"{path}?token={TOKEN}" if name == "token in query" else path
                response = client.request(method, target, content=body, headers=headers)
                if response.status_code != 401:
                    result.violations.append(f"{method} {template} with {name}: HTTP {response.status_code}")
                    continue
                error = response.json()
                if (
                    error.get("error") != "unauthorized"
                    or "bearer" not in response.headers.get("www-authenticate", "").lower()
                ):
                    result.violations.append(f"{method} {template} with {name}: body {error}")
                result.unauthorized_401 += 1
            params = {"line_number": 1} if template.endswith("/lines") else None  # a raw line
            ok = client.request(
                method, path, content=body, params=params, headers={"Authorization": f"Bearer {TOKEN}"}
            )
            if ok.status_code != 200:
                result.violations.append(f"{method} {template} with the token: HTTP {ok.status_code}")
        runs = client.get("/v1/runs").json()["runs"]
        if [r["run_id"] for r in runs] != ["sec-run"]:
            result.violations.append(f"unauthorized requests changed state: runs {runs}")


def _check_public_binds(workdir: Path, launch: Launch, result: SecurityResult) -> None:
    for host in ("0.0.0.0", "::", "192.0.2.1", "sidecar.example"):
        proc = SidecarProcess(
            workdir / "bind" / "journal.sqlite3", workdir / "bind.log", launch=launch, env={TOKEN_ENV_VAR: ""}
        )
        proc.extra_args = ["--host", host]
        code = proc.run_to_exit(30)
        log = proc.log_since()
        if code == 2 and "refusing to bind non-loopback address" in log and "listening" not in log:
            result.public_binds_refused += 1
        else:
            result.violations.append(f"bind {host} without a token: exit {code}, log {log[-300:]!r}")


def _check_canary(workdir: Path, launch: Launch, result: SecurityResult) -> None:
    planted: list[int] = []

    def hook(row: dict[str, Any]) -> dict[str, Any]:
        out = plant_canary(row)
        planted.append(out.pop("_canary_count"))
        return out

    run = generate_run(
        "canary", workdir / "canary" / "run", num_tasks=12, seed=21, fault_rate=0.05, text_hook=hook
    )
    run.write_files()
    result.canary_rows = sum(1 for n in planted if n)
    result.canary_strings = sum(planted)
    if result.canary_rows < len(planted) // 2:
        result.violations.append(f"canary planted in only {result.canary_rows} of {len(planted)} rows")
    log_path = workdir / "canary" / "sidecar.log"
    proc = SidecarProcess(
        workdir / "canary" / "journal.sqlite3", log_path, launch=launch, env={TOKEN_ENV_VAR: TOKEN}
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    outputs: list[bytes] = []
    with proc as url, httpx.Client(base_url=url, timeout=30, headers=auth) as client:
        post = f"/v1/runs/{run.run_id}/events"
        for start in range(0, len(run.events), 7):
            client.post(post, json=run.events[start : start + 7]).raise_for_status()
        bad_bodies: list[Callable[[], httpx.Response]] = [
            lambda: client.post(post, content=b'[{"kind": "' + CANARY.encode() + b'"}]'),
            lambda: client.post(post, content=CANARY.encode()),
            lambda: client.post(post, json=[{"kind": "completed", "seconds": 1, "row": CANARY}]),
            lambda: client.post(post, json=[{"kind": "failed", "row": {"x": CANARY}, "seconds": CANARY}]),
            lambda: client.post(post, json={"events": [{"kind": "run_started", "ignored_checks": [CANARY]}]}),
            lambda: client.post(post, content=b"[" * 300 + CANARY.encode() + b"]" * 300),
        ]
        for send in bad_bodies:
            response = send()
            if not 400 <= response.status_code < 500:
                result.violations.append(f"bad body with the canary: HTTP {response.status_code}")
        for accept in ("text/plain", "application/openmetrics-text"):
            outputs.append(client.get("/metrics", headers={"Accept": accept}).content)
        params = {"run_id": run.run_id}
        for path in (
            "/report",
            "/report/verdicts",
            "/report/quality_summary.json",
            "/drain_margin",
            "/v1/runs",
        ):
            outputs.append(client.get(path, params=params).content)
        files = report_files(client, run.run_id)
    if files != batch_files(run.run_dir):
        result.violations.append("canary run: report differs from the batch check")
    for output in outputs:
        result.outputs_scanned += 1
        if CANARY.encode() in output:
            result.violations.append(f"canary found in an output: {output[:120]!r}")
    logs = log_path.read_bytes()
    result.log_bytes_scanned = len(logs)
    if b"request rejected" not in logs:
        result.violations.append("the log holds no rejection lines: is it captured?")
    if CANARY.encode() in logs:
        result.violations.append("canary found in the service log")
    if TOKEN.encode() in logs:
        result.violations.append("token found in the service log")


def run_security_checks(workdir: Path, *, launch: Launch = "exec") -> SecurityResult:
    result = SecurityResult()
    routes = mutating_routes(workdir)
    result.mutating_routes = [f"{m} {p}" for m, p in routes]
    if not routes:
        result.violations.append("no mutating route found")
    proc = SidecarProcess(
        workdir / "auth" / "journal.sqlite3", workdir / "auth.log", launch=launch, env={TOKEN_ENV_VAR: TOKEN}
    )
    with proc as url:
        _check_auth(url, routes, result)
    _check_public_binds(workdir, launch, result)
    _check_canary(workdir, launch, result)
    return result
