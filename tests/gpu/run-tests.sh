#!/usr/bin/env bash
# tests/gpu/run-tests.sh - on a machine with an NVIDIA GPU, from the repository root:
# build everything, run the test binary, then the CUDA kernel benchmarks; logs go under
# $OUT (default build/gpu-logs) and a short summary is printed last. WA_REQUIRE_GPU=1: the GPU
# tests run, so a device that is missing fails them instead of leaving them "skipped".
#
#   TESTS='cuda*'  doctest -tc filter for the test run (default: every test)
#   BENCH=0        skip the benchmarks
#   CUDA_SANITIZE=1 also run the attention and layer tests under compute-sanitizer (memcheck,
#                  racecheck), CUDA_SANITIZE_TIMEOUT seconds each (default 120)
#
# If the full build fails (say another part of the tree is mid-change), a CUDA-only test
# binary (tests/test-main.cpp + tests/test-cuda.cpp + vt.cpp + vt-cuda.cu) is built instead,
# so the backend can still be checked; the summary says so.
set -u
OUT=${OUT:-build/gpu-logs}
TESTS=${TESTS:-*}
BENCH=${BENCH:-1}
CUDA_SANITIZE=${CUDA_SANITIZE:-0}
JOBS=${JOBS:-16}
mkdir -p "$OUT" build

summary=()
note() { summary+=("$1"); echo "== $1"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
    >"$OUT/gpu.txt" 2>&1 || true
note "gpu: $(tail -n 1 "$OUT/gpu.txt")"

# ---- build ----
bin=build/test-all
t0=$(date +%s)
if make -j"$JOBS" SANITIZE=0 >"$OUT/build.log" 2>&1; then
    note "build: make -j$JOBS ok ($(( $(date +%s) - t0 )) s; warnings: $(grep -c 'warning' "$OUT/build.log"); nvcc lines: $(grep -c 'nvcc' "$OUT/build.log"))"
else
    note "build: make -j$JOBS FAILED (see build.log); building the CUDA-only test binary"
    grep -E 'error' "$OUT/build.log" | head -n 5
    NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
    CUDA_HOME=${NVCC%/bin/nvcc}
    INC="-I."; [ -d .deps/doctest ] && INC="$INC -I.deps"
    bin=build/test-cuda-only
    if "$NVCC" -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=compute_80 \
            -I. -DVT_USE_CUDA -c vt-cuda.cu -o build/vt-cuda-only.o >>"$OUT/build.log" 2>&1 &&
       g++ -O3 -march=native -std=c++17 -Wall -Wextra $INC -DVT_USE_CUDA -pthread \
            tests/test-main.cpp tests/test-cuda.cpp vt.cpp build/vt-cuda-only.o -o "$bin" \
            -L"$CUDA_HOME/lib64" -lcudart_static -ldl -lrt >>"$OUT/build.log" 2>&1; then
        note "build: CUDA-only test binary ok"
    else
        note "build: CUDA-only test binary FAILED"
        tail -n 20 "$OUT/build.log"
        printf '%s\n' "${summary[@]}" >"$OUT/summary.txt"
        exit 1
    fi
fi

# ---- tests ----
t0=$(date +%s)
WA_REQUIRE_GPU=1 timeout 900 "$bin" -tc="$TESTS" >"$OUT/tests.log" 2>&1
rc=$?
note "tests ($bin -tc='$TESTS'): exit $rc, $(( $(date +%s) - t0 )) s: $(grep -E '^\[doctest\] test cases' "$OUT/tests.log" | tail -n 1)"
grep -E 'ERROR|FATAL|skipped' "$OUT/tests.log" | head -n 20
grep -E 'MESSAGE: (linear|conv1d_k3|layer_norm|attention|layer) ' "$OUT/tests.log" | sed 's/^.*MESSAGE: /   /' >"$OUT/errors.txt"

# ---- benchmarks ----
if [ "$BENCH" = 1 ]; then
    WA_REQUIRE_GPU=1 VT_CUDA_BENCH=1 timeout 600 "$bin" -tc='cuda bench*' >"$OUT/bench.log" 2>&1
    note "bench: exit $?"
fi

# ---- compute-sanitizer on the CUDA op tests ----
if [ "$CUDA_SANITIZE" = 1 ] && command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
        WA_REQUIRE_GPU=1 timeout "${CUDA_SANITIZE_TIMEOUT:-120}" compute-sanitizer --tool "$tool" --error-exitcode 99 "$bin" \
            -tc='cuda attention*,cuda graph*' >"$OUT/sanitize-$tool.log" 2>&1
        note "compute-sanitizer $tool: exit $? ($(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitize-$tool.log" | tail -n 1))"
    done
fi

echo
echo "==================== summary ===================="
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
echo "---- CUDA vs CPU errors (relative L2) ----"
cat "$OUT/errors.txt" 2>/dev/null
[ "$BENCH" = 1 ] && { echo "---- bench ----"; grep -E '^bench|^    ' "$OUT/bench.log"; }
exit 0
