# How scripts/install-llamacpp.sh builds llama.cpp's server: included after llama.cpp's project() call
# (CMAKE_PROJECT_INCLUDE), with CMAKE_UNITY_BUILD=ON. Measured on 2 quiet cores (bench/TIMINGS.md):
# 299 s as llama.cpp ships its Release build (-O3 everywhere), 227 s with this file's -O1 alone, 170 s
# with -O1 and the unity build.
#
# -O1 outside the kernels: the front end (JSON, Jinja, chat parsers, the HTTP server, the multimodal
# library the server links) is most of the compile time and none of the decode's time. The numbers do
# not change: ggml-base and ggml-cpu, where every tensor is computed, keep -O3 (and -march=native, which
# ggml adds to ggml-cpu alone), and the rest is compiled for plain x86-64 (SSE2, no FMA to contract into)
# without -ffast-math, where GCC keeps IEEE float semantics at every -O level, sampling included. On
# other processors (aarch64 has FMA in its baseline, which GCC contracts into at -O2 and above, not at
# -O1) the rest keeps llama.cpp's -O3: only the unity build applies there.
# tests/real_engine/test_llamacpp.py holds the replay to this build's per-step acceptance, greedy and
# sampled.
#
# The unity build compiles a target's sources in batches (llama.cpp's own src/ does so for its models);
# the multimodal library refuses it (its helper may not see the library's internal headers), so it
# compiles file by file.
include_guard(GLOBAL)
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    set(CMAKE_C_FLAGS_RELEASE "-O1 -DNDEBUG")
    set(CMAKE_CXX_FLAGS_RELEASE "-O1 -DNDEBUG")
endif()

function(speclens_llamacpp_targets)  # deferred: the targets exist once the top-level CMakeLists.txt ran
    foreach(kernels ggml-base ggml-cpu)
        target_compile_options(${kernels} PRIVATE -O3)  # after -O1 on the command line: GCC takes the last
    endforeach()
    set_target_properties(mtmd PROPERTIES UNITY_BUILD OFF)
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL speclens_llamacpp_targets)
