#!/usr/bin/env bash
# The native extensions under AddressSanitizer and UBSan, in a scratch copy of the repository
# (never the in-place build the venv imports): a build with the vector loops and one with the
# portable code only (ROLLOUT_SIDECAR_PORTABLE=1, as a non-x86 machine builds it), each with
# -Wall -Wextra -Werror, each running the native tests; the first also fuzzes the vetter against
# orjson for SANITIZE_FUZZ_SECONDS (default 90). Any sanitizer report fails the step.
#
# Usage (from the repository, after .ci/run made .venv):  bash .ci/sanitize.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
python=${PYTHON:-$repo/.venv/bin/python}
fuzz_seconds=${SANITIZE_FUZZ_SECONDS:-90}

cc=${CC:-cc}
if ! command -v "$cc" >/dev/null 2>&1; then
  echo "SKIPPED: no C compiler ($cc): the native part is not built here, so there is nothing to sanitize"
  exit 0
fi
asan=$("$cc" -print-file-name=libasan.so 2>/dev/null || true)
if [[ -z "$asan" || "$asan" == libasan.so || ! -e "$asan" ]]; then
  echo "SKIPPED: $cc has no AddressSanitizer runtime (libasan.so): install gcc's libasan"
  exit 0
fi

# The sanitizer runtime preloaded (CPython itself is not built with it); leak checks off
# (CPython keeps its objects at exit); any report aborts the process.
# libstdc++ is preloaded too: simdjson (C++, the fallback the tests compare against) throws,
# and ASan's __cxa_throw interceptor needs the C++ runtime loaded before any dlopen.
stdcxx=$("$cc" -print-file-name=libstdc++.so 2>/dev/null || true)
[[ -e "$stdcxx" ]] || stdcxx=
sanitized=(
  LD_PRELOAD="$asan${stdcxx:+ $stdcxx}"
  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
)

scratch=$(mktemp -d "${TMPDIR:-/tmp}/rollout-sidecar-sanitize.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# The native tests: every file that calls the extensions (each skips what is not built).
native_tests=(
  tests/health/test_json_vet.py
  tests/health/test_json_vet_differential.py
  tests/health/test_json_vet_event_rows.py
  tests/health/test_payload_spans.py
  tests/health/test_fast_path.py
  tests/health/test_fast_path_training.py
)

# build NAME VECTOR_PATHS [ENV...]: a scratch copy of the tracked files, built with sanitizers.
build() {
  local name=$1 vector=$2
  shift 2
  local dir=$scratch/$name
  mkdir -p "$dir"
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z | tar --null -cf - -T - | tar -xf - -C "$dir"
  else # an unpacked source tree: everything but the venv and built modules
    tar --exclude=./.venv --exclude='*.so' --exclude=./build -cf - . | tar -xf - -C "$dir"
  fi
  (
    cd "$dir"
    env "$@" \
      CFLAGS="-Werror -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g" \
      LDFLAGS="-fsanitize=address,undefined" \
      "$python" setup.py -q build_ext --inplace >build.log 2>&1 || { cat build.log; echo "FAILED: $name build"; exit 1; }
    if grep -E 'warning:|error:' build.log | grep -v -E 'BetaConfiguration|_BetaConfiguration|SetuptoolsDeprecationWarning'; then
      echo "FAILED: $name build printed compiler warnings"; exit 1
    fi
  )
  # the copy imports its own build, not the venv's editable one
  (cd "$dir" && env "${sanitized[@]}" PYTHONPATH="$dir" "$python" - "$vector" "$dir") <<'PY'
import sys
import health._json_vet as vet, health._payload_spans as spans
assert vet.__file__.startswith(sys.argv[2]) and spans.__file__.startswith(sys.argv[2]), vet.__file__
want = int(sys.argv[1])
assert (vet.VECTOR_PATHS, spans.VECTOR_PATHS) == (want, want), (vet.VECTOR_PATHS, spans.VECTOR_PATHS)
print("built:", vet.__file__, "vector paths:", bool(want))
PY
}

# run NAME PYTEST-ARGS...: the copy's tests on its own build, under the sanitizers.
run() {
  local name=$1
  shift
  local log=$scratch/$name.log status=0
  (
    cd "$scratch/$name"
    env "${sanitized[@]}" PYTHONPATH="$scratch/$name" "$python" -m pytest -q -p no:cacheprovider -x "$@"
  ) >"$log" 2>&1 || status=$?
  tail -n 5 "$log"
  if grep -q -E 'ERROR: AddressSanitizer|runtime error:|SUMMARY: (Address|UndefinedBehavior)Sanitizer' "$log"; then
    grep -B 2 -A 30 -E 'ERROR: AddressSanitizer|runtime error:' "$log" | head -n 80
    echo "FAILED: a sanitizer report in $name"
    return 1
  fi
  if [[ $status -ne 0 ]]; then
    tail -n 60 "$log"
    echo "FAILED: $name tests (exit $status)"
    return 1
  fi
}

echo "-- vector loops (SSE2/SSSE3/AVX2), ASan + UBSan, -Werror"
build vector 1
JSON_VET_FUZZ_SECONDS=$fuzz_seconds run vector "${native_tests[@]}"

echo "-- portable code only (ROLLOUT_SIDECAR_PORTABLE=1), ASan + UBSan, -Werror"
build portable 0 ROLLOUT_SIDECAR_PORTABLE=1
JSON_VET_FUZZ_SECONDS=$((fuzz_seconds / 3)) run portable "${native_tests[@]}"

echo "sanitizers: no report"
