"""Type stub of the C extension built from _payload_spans.c (see health.payload_spans)."""

from typing import Final

from msgspec import Raw

KEPT_TOP_LEVEL_KEYS: Final[tuple[str, ...]]

def compact(
    line: bytes | bytearray | memoryview, /
) -> tuple[bytes, tuple[Raw | None, ...], tuple[Raw | None, ...]] | None: ...
def _use_avx2(enabled: bool, /) -> bool: ...
