"""Build hook for the optional native extensions; everything else is declared in pyproject.toml.

``optional=True``: where no C compiler (or no Python headers) is found, the build warns and
the package installs without them. ``health.json_vet`` then falls back to simdjson, which
refuses a little more but never accepts what orjson would not; ``health.payload_spans``
(without ``health._payload_spans``) has the strict decode read the whole line, as it would
anyway.
"""

import os

from setuptools import Extension, setup

_C_FLAGS = [] if os.name == "nt" else ["-O3", "-std=c11"]

# Each extension is one C file plus the headers it includes (static functions only: one
# translation unit, inlined as before). ``depends`` rebuilds it when a header changes, and
# setuptools (since 68.1; the build asks for 69) puts ``depends`` in the sdist.
_HEADERS = {
    "health._json_vet": [
        "_json_cursor.h",
        "_json_scan.h",
        "_json_utf8.h",
        "_json_number.h",
        "_payload_copy.h",
        "_strict_paths.h",
        "_vet_spans.h",
        "_vet_walk.h",
    ],
    "health._payload_spans": ["_json_cursor.h", "_payload_copy.h", "_strict_paths.h", "_structural_skip.h"],
}

setup(
    ext_modules=[
        Extension(
            name,
            sources=[f"{name.replace('.', '/')}.c"],
            depends=[f"health/{header}" for header in headers],
            extra_compile_args=_C_FLAGS,
            optional=True,
        )
        for name, headers in _HEADERS.items()
    ]
)
