"""The page's HTML: escaping, the policies, the inlined file, and the checks' explanations."""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import orjson

from sidecar.web.page import (
    ASSETS,
    LIVE_CSP,
    UPLOT_VERSION,
    asset_bytes,
    check_explanations,
    embed_json,
    run_html,
    saved_csp,
    saved_html,
)

from .support import HOSTILE

DOCS = Path(__file__).resolve().parents[3] / "docs" / "report.md"


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


class TestEmbedJson:
    def test_nothing_in_the_data_can_close_the_script_element(self) -> None:
        value = {"id": "</script><script>alert(1)</script>", "x": "a&b>\u2028\u2029", HOSTILE: [HOSTILE]}
        text = embed_json(value)
        for forbidden in ("<", ">", "&", "\u2028", "\u2029"):
            assert forbidden not in text
        assert orjson.loads(text) == value


class TestShells:
    def test_the_run_id_is_an_escaped_attribute(self) -> None:
        page = run_html('a"b<c>&')
        assert 'data-run-id="a&quot;b&lt;c&gt;&amp;"' in page
        assert "<c>" not in page

    def test_live_policy_allows_the_sidecar_only(self) -> None:
        directives = dict(part.strip().split(" ", 1) for part in LIVE_CSP.split(";"))
        assert directives["script-src"] == "'self'" and directives["connect-src"] == "'self'"
        assert directives["default-src"] == "'none'"
        assert "unsafe" not in LIVE_CSP


class TestSavedFile:
    def test_inline_script_and_style_are_allowed_by_hash_and_nothing_may_be_fetched(self) -> None:
        page = saved_html({"run_id": HOSTILE, "schema": 1}, None, 1_800_000_000.5)
        scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
        styles = re.findall(r"<style>(.*?)</style>", page, re.S)
        assert len(scripts) == 1 and len(styles) == 1
        policy = saved_csp()
        assert f"script-src {_hash(scripts[0])};" in policy
        assert f"style-src {_hash(styles[0])};" in policy
        assert "connect-src 'none'" in policy
        assert "src=" not in page.replace("src=x onerror", "")  # no script or style loaded by URL
        data = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', page, re.S)
        assert data is not None
        embedded = orjson.loads(data.group(1))
        assert embedded == {
            "page": {"run_id": HOSTILE, "schema": 1},
            "timeline": None,
            "written_at": 1_800_000_000.5,
        }
        assert "<img" not in page.split("<body", 1)[1].replace("<script", "")

    def test_the_title_escapes_the_run_id(self) -> None:
        page = saved_html({"run_id": HOSTILE, "schema": 1}, None)
        assert "<title>Run &lt;img src=x onerror=&quot;window.__pwned=1;alert(1)&quot;&gt;" in page


class TestAssets:
    def test_the_vendored_library_keeps_its_licence_and_provenance(self) -> None:
        assert b"MIT License" in asset_bytes("uPlot-LICENSE.txt")
        assert f"uPlot (v{UPLOT_VERSION})".encode() in asset_bytes("uPlot.iife.min.js")[:200]
        readme = Path(__file__).resolve().parents[3] / f"sidecar/web/vendor/uplot-{UPLOT_VERSION}/README.md"
        assert "npm pack uplot@" + UPLOT_VERSION in readme.read_text()

    def test_every_asset_is_in_the_package(self) -> None:
        for name in ASSETS:
            assert asset_bytes(name)


class TestCheckExplanations:
    def test_equal_the_docs_table(self) -> None:
        rows = re.findall(r"^\| \d+ \| `(\w+)` \| (.*?) \| (.*?) \| (.*?) \|$", DOCS.read_text(), re.M)
        assert {name: tuple(text) for name, *text in rows} == check_explanations()
        assert len(rows) == 14

    def test_every_check_has_an_anchor_on_the_page(self) -> None:
        page = run_html("run")
        for name in check_explanations():
            assert f'<tr id="check-{name}">' in page

    def test_the_docs_code_spans_show_as_code_not_backticks(self) -> None:
        checks = run_html("run").split('id="checks"', 1)[1].split("</section>", 1)[0]
        assert "`" not in checks
        assert "<code>failed_check</code>" in checks and "<code>ng_trajectory.turns</code>" in checks
