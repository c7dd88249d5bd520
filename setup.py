"""Build hook for the optional native extensions; everything else is declared in pyproject.toml.

``optional=True``: where no C compiler (or no Python headers) is found, the build says so in
one line and the package installs without them. ``health.json_vet`` then falls back to
simdjson, which refuses a little more but never accepts what orjson would not;
``health.payload_spans`` (without ``health._payload_spans``) has the strict decode read the
whole line, as it would anyway.

``ROLLOUT_SIDECAR_PORTABLE=1`` at build time compiles the portable code paths only (no SSE2,
SSSE3 or AVX2 loops: ``VET_PORTABLE`` / ``SPANS_PORTABLE``), as a non-x86 or non-GCC build
would; CI builds and tests it (``.ci/sanitize.sh``). Extra flags (``-Werror``, sanitizers)
come from ``CFLAGS`` as usual.
"""

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_C_FLAGS = [] if os.name == "nt" else ["-O3", "-std=c11", "-Wall", "-Wextra"]
_PORTABLE = os.environ.get("ROLLOUT_SIDECAR_PORTABLE", "") not in ("", "0")
_MACROS = [("VET_PORTABLE", "1"), ("SPANS_PORTABLE", "1")] if _PORTABLE else []

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

_SKIPPED = (
    "rollout-sidecar: the optional native part ({name}) was not built ({reason}); the package "
    "works without it, on the slower fallbacks (simdjson vets, msgspec reads whole lines). Install a "
    "C compiler and the Python headers, then reinstall, for the native path."
)


def _say_skipped(name: str, error: Exception) -> None:
    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    sys.stderr.write(_SKIPPED.format(name=name, reason=reason) + "\n")


class _SayWhenSkipped(build_ext):
    """setuptools only warns in the middle of the compiler's output when an optional extension
    fails: say it in one line a newcomer finds, and which part it costs."""

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as error:  # optional: setuptools raises, then skips it
            _say_skipped(ext.name, error)
            raise

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # no compiler at all (before any extension is tried)
            if not all(ext.optional for ext in self.extensions):
                raise
            _say_skipped("health._json_vet, health._payload_spans", error)


setup(
    cmdclass={"build_ext": _SayWhenSkipped},
    ext_modules=[
        Extension(
            name,
            sources=[f"{name.replace('.', '/')}.c"],
            depends=[f"health/{header}" for header in headers],
            extra_compile_args=_C_FLAGS,
            define_macros=_MACROS,
            optional=True,
        )
        for name, headers in _HEADERS.items()
    ],
)
