"""Cheap, deterministic filler text and identifiers.

Payload text is sliced out of one pre-built corpus, so a multi-KB string costs a slice,
not a loop over words: the generator must stream >2,000 rows/s of ~80 KB each.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Final

__all__ = ["hex_id", "text", "words"]

_WORD_TEXT: Final = (
    "the of and to in is that for it as with was on be by this are from at or an not which have "
    "has but all can more one their if will about there when so what into than them some other "
    "model agent task file function value return result error test check input output token "
    "state graph node edge cache queue batch worker thread process request response server "
    "client session config path line column index offset length buffer stream event handler "
    "we need to first then next finally let me verify the answer carefully because assume "
    "suppose consider therefore hence case step because otherwise however since given solve "
    "compute integer list string number matrix vector sum product prime factor divisor remainder"
)
_WORDS: Final = tuple(_WORD_TEXT.split())
_CODE: Final = (
    "def solve(n: int) -> int:\n    total = 0\n    for i in range(n):\n        total += i * i\n"
    "    return total\n",
    "$ ls -la /workspace\ntotal 24\ndrwxr-xr-x 3 user user 4096 src\n-rw-r--r-- 1 user user 812 README.md\n",
    'if __name__ == "__main__":\n    print(solve(int(sys.argv[1])))\n',
    "Traceback (most recent call last):\n  File \"main.py\", line 3, in <module>\nKeyError: 'id'\n",
)
_EXTRA: Final = ("é", "—", "✓", "→", "π", "²", "…", "日本")
_CORPUS_CHARS: Final = 1 << 19


@lru_cache(maxsize=1)
def _corpus() -> str:
    """Half a megabyte of pseudo-prose with code blocks and a little non-ASCII text."""
    rng = random.Random(0x5EED)
    pool = rng.choices(_WORDS, k=_CORPUS_CHARS // 5)
    parts: list[str] = []
    size = cursor = 0
    while size < _CORPUS_CHARS:
        roll = rng.random()
        if roll < 0.04:
            chunk = "\n```python\n" + rng.choice(_CODE) + "```\n"
        elif roll < 0.07:
            chunk = "\n" + rng.choice(_CODE)
        else:
            count = rng.randint(6, 22)
            sentence = " ".join(pool[cursor : cursor + count])
            cursor = (cursor + count) % (len(pool) - 32)
            if roll > 0.97:
                sentence += " " + rng.choice(_EXTRA)
            chunk = sentence[:1].upper() + sentence[1:] + (". " if rng.random() < 0.85 else ".\n\n")
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)


def text(rng: random.Random, length: int) -> str:
    """A ``length``-character slice of the corpus at a random offset (empty for ``length <= 0``)."""
    if length <= 0:
        return ""
    corpus = _corpus()
    if length >= len(corpus):
        repeats = length // len(corpus) + 1
        return (corpus * repeats)[:length]
    start = int(rng.random() * (len(corpus) - length))  # randrange() is 3x slower here
    return corpus[start : start + length]


def words(rng: random.Random, count: int) -> str:
    """A short phrase of ``count`` random words (names, titles, arguments)."""
    return " ".join(rng.choices(_WORDS, k=count))


def hex_id(rng: random.Random, bits: int = 128) -> str:
    """A lowercase hex identifier of ``bits`` random bits, like a uuid4 hex."""
    return f"{rng.getrandbits(bits):0{bits // 4}x}"
