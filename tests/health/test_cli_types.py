"""Ranged argument types and the ``--sidecar`` URL check every subcommand shares."""

from __future__ import annotations

import argparse

import pytest

from health.cli_types import seconds, sidecar_url, size, whole


class TestRanged:
    def test_whole_numbers_hold_both_ends_and_refuse_past_them(self) -> None:
        port = whole(0, 65535)
        assert (port("0"), port("65535")) == (0, 65535)
        for text in ("-1", "65536", "1.5", "x"):
            with pytest.raises(argparse.ArgumentTypeError):
                port(text)

    def test_seconds_exclude_zero_unless_asked_and_every_non_finite_value(self) -> None:
        interval = seconds(60.0)
        assert interval("0.5") == 0.5 and interval("60") == 60.0
        for text in ("0", "-1", "60.001", "nan", "inf", "-inf", "1e400"):
            with pytest.raises(argparse.ArgumentTypeError, match=f"got {text!r}"):
                interval(text)
        assert seconds(10.0, open_low=False)("0") == 0.0

    def test_sizes_take_binary_units_and_name_the_range_in_them(self) -> None:
        cap = size(1024, 16 << 30)
        assert (cap("64M"), cap("1KiB"), cap("2048")) == (64 << 20, 1024, 2048)
        with pytest.raises(argparse.ArgumentTypeError, match=r"must be in 1K\.\.16G, got '17G'"):
            cap("17G")
        with pytest.raises(argparse.ArgumentTypeError, match="not a size: 'infM'"):
            cap("infM")

    def test_the_message_says_the_range(self) -> None:
        assert whole(1, 100).describe() == "in 1..100"
        assert seconds(86400).describe() == "> 0 and <= 86400 s"


class TestSidecarUrl:
    @pytest.mark.parametrize(
        ("text", "url"),
        [
            ("http://127.0.0.1:9400/", "http://127.0.0.1:9400"),
            ("https://sidecar.example", "https://sidecar.example"),
        ],
    )
    def test_http_urls_pass_without_a_trailing_slash(self, text: str, url: str) -> None:
        assert sidecar_url(text) == url

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            (
                "127.0.0.1:9400",
                "not an http(s) URL: '127.0.0.1:9400' (give the scheme, e.g. http://127.0.0.1:9400)",
            ),
            ("localhost:9400", "(give the scheme, e.g. http://localhost:9400)"),
            ("ftp://host", "not an http(s) URL: 'ftp://host'"),
            ("http://:9400", "no host in 'http://:9400'"),
            ("http://host:99999", "bad port in 'http://host:99999'"),
        ],
    )
    def test_anything_else_is_refused_naming_the_fix(self, text: str, message: str) -> None:
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            sidecar_url(text)
        assert message in str(refused.value)
