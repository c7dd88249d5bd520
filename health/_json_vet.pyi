"""Type stub of the C extension built from _json_vet.c (see health.json_vet)."""

from typing import Final

MAX_DEPTH: Final[int]

def vet(data: bytes | bytearray | memoryview, max_depth: int = 1024, /) -> bool: ...
