"""Build hook for the optional native JSON vetter; everything else is declared in pyproject.toml.

``optional=True``: where no C compiler (or no Python headers) is found, the build warns and
the package installs without ``health._json_vet``; ``health.json_vet`` then falls back to
simdjson, which refuses a little more but never accepts what orjson would not.
"""

import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "health._json_vet",
            sources=["health/_json_vet.c"],
            extra_compile_args=[] if os.name == "nt" else ["-O3", "-std=c11"],
            optional=True,
        )
    ]
)
