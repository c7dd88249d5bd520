#!/usr/bin/env bash
# The conformance vectors and the contract tests at the floor of each behaviour-critical
# dependency's range (pyproject.toml [tool.rollout-sidecar] floor-tested), in a second small venv:
# the main venv has the newest releases, so both ends of every range are tested.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=.venv-floors
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
.venv/bin/python .ci/dependency_floors.py > "$constraints"
echo "floors: $(tr '\n' ' ' < "$constraints")"
[[ -x $venv/bin/python ]] || python3 -m venv $venv
quiet() { "$@" 2>&1 | { grep -v -e "^WARNING: Location 'file://" -e "BuildBackendWarning" || true; }; }
quiet $venv/bin/python -m pip install -q -c "$constraints" -r "$constraints" \
  pytest pytest-asyncio pytest-timeout hypothesis pyyaml
# The project itself without re-resolving: its other dependencies at their newest.
quiet $venv/bin/python -m pip install -q -c "$constraints" -e .
$venv/bin/python -m pip list 2>/dev/null | grep -iE '^(pydantic|pydantic_core|orjson|msgspec|pysimdjson) '
$venv/bin/python -m pytest -q -p no:cacheprovider \
  tests/health/test_vectors.py tests/health/test_roads.py tests/health/test_json_vet.py tests/health/test_conversation.py \
  tests/health/test_contract.py tests/health/test_digest.py tests/health/test_evidence.py \
  tests/sidecar/test_events.py tests/sidecar/test_facts.py
