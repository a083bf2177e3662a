#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, then run them (what .ci/run calls).
# Debian's chromium is for the real-browser test (tests/test_browser.py); Playwright drives it.
# Extra arguments go to pytest (e.g. -m "not slow" for the fast part).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v chromium >/dev/null 2>&1; then
    SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
    $SUDO apt-get update -q && $SUDO apt-get install -y -q chromium
fi
python3 -m venv .venv
.venv/bin/pip install -q -r requirements.txt
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/python -m pytest -q "$@"
# The engine on the floor of the supported transformers range (tests/requirements-floor.txt).
python3 -m venv .venv-floor
.venv-floor/bin/pip install -q -r tests/requirements-floor.txt
.venv-floor/bin/python -m pytest -q -p no:cacheprovider tests/engine -m "not slow"
