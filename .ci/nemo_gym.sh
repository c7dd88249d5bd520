#!/usr/bin/env bash
# NeMo Gym 0.7.0 and this project resolved into one Python 3.13 venv: `pip check` must be clean and
# NeMo Gym's own RolloutCollectionHelper must dispatch through RemoteLatencyTracker into a sidecar, and
# its ng_collect_rollouts run under `rollout-sidecar attach` (tests/nemo_gym). Bounded: the venv (NeMo
# Gym's dependencies are large) is kept between local runs in $NEMO_GYM_VENV, and only this project
# is reinstalled into it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
venv="${NEMO_GYM_VENV:-$HOME/.cache/rollout-sidecar/nemo-gym-0.7.0-py313}"

python313=""
for candidate in "${NEMO_GYM_PYTHON:-}" "$(command -v python3.13 || true)" "$HOME"/.pyenv/versions/3.13.*/bin/python; do
  # A pyenv shim exists for every version but runs only the selected one: try each candidate.
  if [[ -n "$candidate" && -x "$candidate" ]] && "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 13)' 2>/dev/null; then
    python313=$candidate; break
  fi
done
if [[ -z "$python313" ]]; then
  echo "SKIPPED: no Python 3.13 here (NeMo Gym 0.7.0 needs it); set NEMO_GYM_PYTHON to one"
  exit 0
fi
version=$("$python313" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')
# NeMo Gym asks Python >= 3.13.14; an older 3.13 runs it, so say so and pass the flag.
ignore=()
if "$python313" -c 'import sys; sys.exit(sys.version_info >= (3, 13, 14))'; then
  echo "Python $version is older than the 3.13.14 NeMo Gym asks: installing with --ignore-requires-python"
  ignore=(--ignore-requires-python)
fi

quiet() { "$@" 2>&1 | { grep -v -e "^WARNING: Location 'file://" -e "BuildBackendWarning" || true; }; }
[[ -x "$venv/bin/python" ]] || "$python313" -m venv "$venv"
# One resolution for both, so pip has to find versions that satisfy NeMo Gym and us at once.
quiet "$venv/bin/python" -m pip install -q "${ignore[@]}" "nemo-gym==0.7.0" "$repo" pytest
quiet "$venv/bin/python" -m pip install -q "${ignore[@]}" --no-deps --force-reinstall "$repo"
"$venv/bin/python" -m pip check
"$venv/bin/python" -m pip list 2>/dev/null | grep -iE '^(nemo-gym|rollout-sidecar|pydantic|pydantic_core|orjson|msgspec|pysimdjson) '

# The installed packages, not the source tree: run from a scratch directory without the repo's conftest.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
(cd "$scratch" && "$venv/bin/python" -m pytest -q -p no:cacheprovider --noconftest --import-mode=importlib \
  --rootdir "$scratch" -c /dev/null "$repo/tests/nemo_gym")
