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

setup(
    ext_modules=[
        Extension(name, sources=[f"{name.replace('.', '/')}.c"], extra_compile_args=_C_FLAGS, optional=True)
        for name in ("health._json_vet", "health._payload_spans")
    ]
)
