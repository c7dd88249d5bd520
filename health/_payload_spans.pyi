"""Type stub of the C extension built from _payload_spans.c and its headers (see health.payload_spans).
KEPT_TOP_LEVEL_KEYS comes from _strict_paths.h, shared with _json_vet."""

from typing import Final

from msgspec import Raw

KEPT_TOP_LEVEL_KEYS: Final[tuple[str, ...]]

def compact(
    line: bytes | bytearray | memoryview, /
) -> tuple[bytes, tuple[Raw | None, ...], tuple[Raw | None, ...]] | None: ...
def _use_avx2(enabled: bool, /) -> bool: ...
