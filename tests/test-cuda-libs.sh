#!/usr/bin/env bash
# A CUDA build on a machine without CUDA and on one with it (issue 25): no file we build lists a
# CUDA library as NEEDED (readelf), `--device cuda` says in one line what is missing (the driver,
# with the version CUDA needs; cuBLASLt, with each place tried), cuBLASLt is looked for in the
# order vt-cuda-gemm.cuh documents (WHISPER_AUDIO_CUBLASLT, WHISPER_AUDIO_NVIDIA_LIB_DIRS, the system's
# soname, /usr/local/cuda/lib64), as the dynamic loader's own log shows it (LD_DEBUG=files), and in
# a mount namespace where the toolkit's folders are empty main starts and encodes on the CPU.
# Run from the repository root by `make test` (BUILD, CUDA from make); a build without CUDA skips.
set -euo pipefail
BUILD=${BUILD:-build}
MAIN=$BUILD/main
MODEL=build/micro-80-f32.gguf
AUDIO=samples/speech_16k.wav
T=$(mktemp -d "${TMPDIR:-/tmp}/whisper-audio-cuda-libs.XXXXXX")
trap 'rm -rf "$T"' EXIT
passed=0
ok() { echo "test-cuda-libs: ok: $*"; passed=$((passed + 1)); }
fail() { echo "test-cuda-libs: FAILED: $*"; exit 1; }

if [ "${CUDA:-1}" != 1 ]; then
    echo "test-cuda-libs: skipped: a build without CUDA (CUDA=${CUDA:-})"
    exit 0
fi

# ---- what the files need ------------------------------------------------------------------
# the soname the backend opens, as the binary spells it (libcublasLt.so.<its cuBLAS major>)
soname=$(strings "$MAIN" | grep -x 'libcublasLt\.so\.[0-9]*' | sort -u || true)
[ -n "$soname" ] && [ "$(wc -l <<<"$soname")" = 1 ] || fail "$MAIN has no CUDA backend (no one libcublasLt soname in it: $soname)"
major=${soname##*.}
files=("$MAIN" "$BUILD/bench" "$BUILD/test-all" "$BUILD/libwhisper-audio.so")
[ -e "$BUILD/whisper-audio-server" ] && files+=("$BUILD/whisper-audio-server")
for f in "${files[@]}"; do
    [ -e "$f" ] || fail "$f was not built"
    grep -q "$soname" "$f" || fail "$f has no CUDA backend"
    needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    bad=$(grep -E '^lib(cudart|cublas|cublasLt|cuda)\.so' <<<"$needed" || true)
    [ -z "$bad" ] || fail "$f lists $(echo $bad) as NEEDED"
done
ok "no CUDA library NEEDED by ${#files[@]} files with the CUDA backend (${files[*]##*/})"

# ---- --device cuda as this machine has it --------------------------------------------------------
# run [ENV=...] -- ARGS: main on the micro model, its error line in $T/err.line
run() {
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$MAIN" -m "$MODEL" -f "$AUDIO" -o "$T/out.npy" --no-progress "$@" >"$T/out" 2>"$T/err" && rc=0 || rc=$?
    grep '^error: ' "$T/err" >"$T/err.line" || true
    return $rc
}
run -- --device cpu || fail "main --device cpu: $(cat "$T/err")"
cp "$T/out.npy" "$T/cpu.npy"
if run -- --device cuda; then
    gpu=1
    ok "main --device cuda runs here (a GPU, its driver and cuBLASLt $major are installed)"
else
    gpu=0
    [ "$(wc -l <"$T/err.line")" = 1 ] || fail "--device cuda: not one error line: $(cat "$T/err")"
    grep -q "CUDA backend unavailable: cuda: " "$T/err.line" || fail "--device cuda: $(cat "$T/err.line")"
    if grep -q "no NVIDIA driver" "$T/err.line"; then
        grep -q "no NVIDIA driver (libcuda.so.1 not found; CUDA $major needs driver [0-9]* or newer)" "$T/err.line" ||
            fail "the missing driver's message: $(cat "$T/err.line")"
        ok "without a driver: $(sed 's/^error: //' "$T/err.line")"
    else
        ok "--device cuda fails here with: $(sed 's/^error: //' "$T/err.line")"
    fi
fi

# ---- WHISPER_AUDIO_CUBLASLT: that file, and only it --------------------------------------------
if run WHISPER_AUDIO_CUBLASLT="$T/none/$soname" WHISPER_AUDIO_NVIDIA_LIB_DIRS="$T" -- --device cuda; then
    fail "--device cuda ran with WHISPER_AUDIO_CUBLASLT naming a missing file"
fi
grep -q "cuBLASLt $major not found (tried $T/none/$soname): install the CUDA Toolkit $major or, for Python, nvidia-cublas $major (the wheel's extra \[cuda\])" "$T/err.line" ||
    fail "a missing WHISPER_AUDIO_CUBLASLT: $(cat "$T/err.line")"
ok "WHISPER_AUDIO_CUBLASLT naming a missing file: nothing else tried, the message says what to install"
run WHISPER_AUDIO_CUBLASLT="$(realpath "$BUILD/libwhisper-audio.so")" -- --device cuda && fail "a library that is not cuBLASLt was taken"
grep -q "libwhisper-audio.so: it has no cublasLtGetVersion)" "$T/err.line" || fail "a library that is not cuBLASLt: $(cat "$T/err.line")"
ok "a file that is not cuBLASLt is refused with the reason"

# ---- the search order, in the dynamic loader's log ---------------------------------------------
# tried: the libcublasLt files main asked the loader for, in order; loaded: the one it initialised
loader_log() { { env "$@" LD_DEBUG=files "$MAIN" -m "$MODEL" -f "$AUDIO" -o "$T/out.npy" --device cuda --no-progress 2>&1 || true; }; }
tried() { loader_log "$@" | sed -n "s|.*file=\([^ ]*libcublasLt[^ ]*\) \[0\];  dynamically loaded by $MAIN .*|\1|p" | tr '\n' ' '; }
loaded() { loader_log "$@" | sed -n 's|.*calling init: \([^ ]*libcublasLt[^ ]*\)$|\1|p'; }
real=$(ldconfig -p | awk -v s="$soname" '$1 == s && !found++ { print $NF }')  # no early exit: ldconfig would die of SIGPIPE under pipefail
system_tries="$soname "                                  # found through the loader's cache
if [ -z "$real" ] && [ -e "/usr/local/cuda/lib64/$soname" ]; then
    real=/usr/local/cuda/lib64/$soname
    system_tries="$soname $real "                       # the soname fails, the toolkit's place loads
fi
if [ -z "$real" ]; then
    echo "test-cuda-libs: skipped: the search order with a real cuBLASLt ($soname is not installed)"
else
    mkdir -p "$T/site/nvidia/cu13/lib" "$T/empty"
    ln -s "$real" "$T/site/nvidia/cu13/lib/$soname"
    got=$(tried WHISPER_AUDIO_NVIDIA_LIB_DIRS="$T/empty:$T/site/nvidia/cu13/lib")
    [ "$got" = "$T/empty/$soname $T/site/nvidia/cu13/lib/$soname " ] || fail "the wheel folders' order: tried $got"
    got=$(loaded WHISPER_AUDIO_NVIDIA_LIB_DIRS="$T/empty:$T/site/nvidia/cu13/lib")
    [ "$got" = "$T/site/nvidia/cu13/lib/$soname" ] || fail "the wheel folders: loaded '$got'"
    ok "WHISPER_AUDIO_NVIDIA_LIB_DIRS: each folder in order, the first that has $soname taken"
    got=$(tried WHISPER_AUDIO_CUBLASLT="$real" WHISPER_AUDIO_NVIDIA_LIB_DIRS="$T/site/nvidia/cu13/lib")
    [ "$got" = "$real " ] || fail "WHISPER_AUDIO_CUBLASLT set: tried $got"
    ok "WHISPER_AUDIO_CUBLASLT ahead of the wheel folders"
    got=$(tried WHISPER_AUDIO_NVIDIA_LIB_DIRS="$T/empty")
    [ "$got" = "$T/empty/$soname $system_tries" ] || fail "the system's after the wheel folders: tried $got"
    got=$(loaded WHISPER_AUDIO_NVIDIA_LIB_DIRS="$T/empty")
    [ "$got" = "$real" ] || fail "the system's cuBLASLt: loaded '$got', not $real"
    ok "then the system's: tried $(echo $system_tries), loaded $real"
fi

# ---- the toolkit hidden: a mount namespace with its folders empty -------------------------------
# every folder that holds the CUDA runtime or cuBLASLt (the loader's cache, /usr/local/cuda/lib64)
# gets an empty tmpfs over it; the driver's folder, a system one, is left alone
ns=(unshare -m)
[ "$(id -u)" = 0 ] || ns=(unshare -rm)
dirs=$( { ldconfig -p | awk '$1 ~ /^lib(cudart|cublasLt)\.so/ { print $NF }'; ls /usr/local/cuda/lib64/libcublasLt.so* 2>/dev/null || true; } |
        xargs -r -n1 dirname | xargs -r -n1 realpath | sort -u)
system=$(grep -xE '/(usr/)?lib(64|32|/x86_64-linux-gnu)?' <<<"$dirs" || true)
if ! "${ns[@]}" true 2>/dev/null; then
    echo "test-cuda-libs: skipped: the hidden toolkit (no mount namespace here: ${ns[*]} failed)"
elif [ -n "$system" ]; then
    echo "test-cuda-libs: skipped: the hidden toolkit (CUDA libraries in a system folder: $(echo $system))"
else
    cat >"$T/inside.sh" <<'SH'
set -eu
for d in $DIRS; do mount -t tmpfs none "$d"; done
for d in $DIRS; do [ -z "$(ls -A "$d")" ] || { echo "$d is not empty"; exit 1; }; done
"$MAIN" -m "$MODEL" -f "$AUDIO" -o "$T/hidden-cpu.npy" --device cpu --no-progress >/dev/null 2>"$T/hidden.err"
"$MAIN" -m "$MODEL" -f "$AUDIO" -o "$T/hidden-auto.npy" --no-progress >/dev/null 2>>"$T/hidden.err"
"$MAIN" -m "$MODEL" -f "$AUDIO" -o "$T/hidden-cuda.npy" --device cuda --no-progress >/dev/null 2>"$T/hidden-cuda.err" && exit 2
exit 0
SH
    DIRS="$(echo $dirs)" MAIN="$MAIN" MODEL="$MODEL" AUDIO="$AUDIO" T="$T" "${ns[@]}" bash "$T/inside.sh" ||
        fail "with $(echo $dirs) hidden: $(cat "$T/hidden.err" "$T/hidden-cuda.err" 2>/dev/null | tail -n 3)"
    cmp -s "$T/hidden-cpu.npy" "$T/cpu.npy" && cmp -s "$T/hidden-auto.npy" "$T/cpu.npy" ||
        fail "with the toolkit hidden, main's CPU output differs"
    line=$(grep '^error: ' "$T/hidden-cuda.err")
    grep -q "cuBLASLt $major not found (tried $soname (the system's), /usr/local/cuda/lib64/$soname)" <<<"$line" ||
        fail "with the toolkit hidden, --device cuda: $line"
    ok "with $(echo $dirs) hidden: main runs on the CPU (--device cpu, auto), --device cuda: ${line#error: }"
fi
echo "test-cuda-libs: $passed checks passed"
