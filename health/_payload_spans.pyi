"""Type stub of the C extension built from _payload_spans.c and its headers (see health.payload_spans).
KEPT_TOP_LEVEL_KEYS comes from _strict_paths.h, shared with _json_vet."""

from typing import Final

from msgspec import Raw

KEPT_TOP_LEVEL_KEYS: Final[tuple[str, ...]]
VECTOR_PATHS: Final[int]
"""1 where built with the SSE2/AVX2 loops, 0 for a portable build (ROLLOUT_SIDECAR_PORTABLE=1)."""

def compact(
    line: bytes | bytearray | memoryview, /
) -> tuple[bytes, tuple[Raw | None, ...], tuple[Raw | None, ...]] | None: ...
def _use_avx2(enabled: bool, /) -> bool: ...
