"""Type stub of the C extension built from _json_vet.c and its headers (see health.json_vet,
health.payload_spans). KEPT_TOP_LEVEL_KEYS and TEXT_KEYS come from _strict_paths.h, shared with
_payload_spans."""

from typing import Final, Literal

from msgspec import Raw

MAX_DEPTH: Final[int]
KEPT_TOP_LEVEL_KEYS: Final[tuple[str, ...]]
TEXT_KEYS: Final[tuple[str, ...]]
VECTOR_PATHS: Final[int]
"""1 where built with the SSE2/SSSE3 loops, 0 for a portable build (ROLLOUT_SIDECAR_PORTABLE=1)."""

def vet(data: bytes | bytearray | memoryview, max_depth: int = 1024, /) -> bool: ...
def vet_compact(
    line: bytes | bytearray | memoryview, max_depth: int = 1024, /
) -> tuple[bytes, tuple[Raw | None, ...], tuple[Raw | None, ...]] | Literal[False] | None: ...
def vet_lean(
    line: bytes | bytearray | memoryview, max_depth: int = 1024, /
) -> tuple[bytes, bytes] | Literal[False] | None: ...
def vet_event_rows(
    body: bytes | bytearray | memoryview, max_depth: int = 1024, /
) -> tuple[bytes, list[tuple[int, int]]] | bool: ...
