"""The page's HTML: the served shells (run list, one run) and the self-contained saved file.

The served shells hold no data: the script fetches it from the JSON endpoints, and the
Content-Security-Policy lets scripts, styles and requests come from the sidecar only. The saved
file inlines the same script and styles (allowed by their sha256 in its CSP) and carries its data
as JSON in a ``<script type="application/json">`` that is never executed, with ``<``, ``>``,
``&``, U+2028 and U+2029 escaped so no data can close that element. Its CSP allows no request at
all. Every text the server puts into HTML goes through :func:`html.escape`.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from functools import cache
from importlib import resources
from typing import Any, Final

import orjson

__all__ = [
    "ASSETS", "LIVE_CSP", "UPLOT_VERSION", "asset_bytes", "check_explanations", "embed_json", "index_html",
    "run_html", "saved_csp", "saved_html",
]

UPLOT_VERSION: Final = "1.6.32"
_VENDOR: Final = f"vendor/uplot-{UPLOT_VERSION}"
#: Files served under ``/static/`` (URL path -> package path under ``sidecar/web``), the only ones.
ASSETS: Final[dict[str, str]] = {
    "page.js": "static/page.js",
    "page.css": "static/page.css",
    "uPlot.iife.min.js": f"{_VENDOR}/uPlot.iife.min.js",
    "uPlot.min.css": f"{_VENDOR}/uPlot.min.css",
    "uPlot-LICENSE.txt": f"{_VENDOR}/LICENSE",
}
LIVE_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_SCRIPTS: Final = ("uPlot.iife.min.js", "page.js")
_STYLES: Final = ("uPlot.min.css", "page.css")
_ESCAPES: Final = {ord(char): f"\\u{ord(char):04x}" for char in "<>&\u2028\u2029"}
_CHECK_ROW: Final = re.compile(r"^\| \d+ \| `(\w+)` \| (.*?) \| (.*?) \| (.*?) \|$", re.M)
_CODE_SPAN: Final = re.compile(r"`([^`]+)`")


@cache
def asset_bytes(name: str) -> bytes:
    """The bytes of the static asset ``name`` (a key of :data:`ASSETS`), read once from the package."""
    return resources.files("sidecar.web").joinpath(ASSETS[name]).read_bytes()


def embed_json(value: Any) -> str:
    """``value`` as JSON safe inside a ``<script type="application/json">`` element."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode().translate(_ESCAPES)


@cache
def check_explanations() -> dict[str, tuple[str, ...]]:
    """Each check's ``(looks at, fires when, what to do)``, in registry order: ``checks.md``'s table."""
    table = resources.files("sidecar.web").joinpath("checks.md").read_text(encoding="utf-8")
    return {name: tuple(texts) for name, *texts in _CHECK_ROW.findall(table)}


def _cell(text: str) -> str:
    """A docs table cell as HTML: escaped, its `code spans` as ``<code>``."""
    return _CODE_SPAN.sub(r"<code>\1</code>", html.escape(text))


def _checks_section() -> str:
    rows = "".join(
        f'<tr id="check-{html.escape(name)}"><td><code>{html.escape(name)}</code></td>'
        + "".join(f"<td>{_cell(text)}</td>" for text in texts)
        + "</tr>"
        for name, texts in check_explanations().items()
    )
    return (
        '<section class="card" id="checks"><h2>The checks</h2>'
        '<p class="caption">What each health check looks at, when it fires and what to do '
        '(docs/report.md).</p><table data-table="checks"><thead><tr><th>check</th><th>looks at</th>'
        f"<th>fires when</th><th>what to do</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _document(head: str, body_attrs: str, title: str, tail: str = "") -> str:
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{html.escape(title)}</title>{head}</head>"
        f'<body {body_attrs}><p id="error" role="status"></p><main id="app">'
        '<p class="muted">Loading\u2026 (this page needs JavaScript)</p></main>'
        f'<div id="checks-holder">{_checks_section()}</div>'
        f'<footer id="footer">rollout-sidecar \u00b7 charts by uPlot {UPLOT_VERSION} (MIT)</footer>'
        f"{tail}</body></html>\n"
    )


def _linked_assets() -> str:
    styles = "".join(f'<link rel="stylesheet" href="/static/{name}">' for name in _STYLES)
    scripts = "".join(f'<script src="/static/{name}" defer></script>' for name in _SCRIPTS)
    return styles + scripts


def index_html() -> str:
    """The run list (``GET /``): a shell the script fills from ``/v1/runs``."""
    return _document(_linked_assets(), 'data-mode="index"', "Runs \u00b7 rollout-sidecar")


def run_html(run_id: str) -> str:
    """One run (``GET /runs/{run_id}``): a shell the script fills from the run's JSON endpoints."""
    attrs = f'data-mode="live" data-run-id="{html.escape(run_id, quote=True)}"'
    return _document(_linked_assets(), attrs, f"Run {run_id} \u00b7 rollout-sidecar")


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _inline_parts() -> tuple[str, str]:
    style = "\n".join(asset_bytes(name).decode() for name in _STYLES)
    script = "\n".join(asset_bytes(name).decode() for name in _SCRIPTS)
    if "</script" in script.lower() or "</style" in style.lower():
        raise ValueError("an asset contains a closing tag and cannot be inlined")
    return style, script


def saved_csp() -> str:
    """The saved file's policy: its own inline script and style (by hash), and no request at all."""
    style, script = _inline_parts()
    return (
        f"default-src 'none'; script-src {_digest(script)}; style-src {_digest(style)}; "
        "img-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )


def saved_html(page: dict[str, Any], timeline: dict[str, Any] | None, written_at: float | None = None) -> str:
    """The self-contained page of one run: script, styles and data inline, no request made.
    ``written_at``: when the file is written (Unix seconds), which it says."""
    style, script = _inline_parts()
    head = (
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(saved_csp(), quote=True)}">'
        f"<style>{style}</style>"
    )
    data = embed_json({"page": page, "timeline": timeline, "written_at": written_at})
    tail = f'<script type="application/json" id="page-data">{data}</script><script>{script}</script>'
    return _document(head, 'data-mode="saved"', f"Run {page.get('run_id')} \u00b7 rollout-sidecar", tail)
