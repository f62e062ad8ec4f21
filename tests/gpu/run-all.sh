#!/usr/bin/env bash
# tests/gpu/run-all.sh - everything a GPU machine checks, in one call, from the repository
# root: build, the whole test suite (CUDA tests included), the unpadded-window reference,
# parity against transformers for every size, and the speed comparison. Logs under $OUT;
# the tables are printed last.
#
#   STEPS="tests parity compare"   which steps (default: all; "nopad" makes the reference,
#                                  "stages" times main's stages on long audio, "init" main's
#                                  load and init against the floor under it (tests/gpu/init-bench.py),
#                                  "inittrace" the encoder's and the pipeline's init, CUDA
#                                  calls by name (tests/gpu/init-trace.py: CUPTI), "towers" the
#                                  audio-LLM towers' parity, "e2e" main's whole path against
#                                  transformers' pipeline, our forward alone and our decoder
#                                  alone (tests/gpu/e2e.py: 16 kHz mono WAV, 44.1 kHz stereo
#                                  WAV and FLAC, 48 kHz MP3 and Opus, each an hour and 1000 x
#                                  5 s, base and large-v3, pooled, and full f32/f16 rows
#                                  against dd's disk bandwidth; E2E_ROWS='mp3:*,...' picks
#                                  rows; about 4 min of device time), "attention" our attention
#                                  kernels and their measurement variants beside torch's flash and
#                                  cuDNN attention (ATTENTION_BATCHES, default 1,32), "dev" the
#                                  measurement-only kernel variants of dev/cuda/ (build/dev/attention:
#                                  each version checked against the CPU and the library's kernel, then
#                                  timed; DEV_BATCHES, default "1 32"; carried by tests/gpu/bin-carry.sh
#                                  or built here by make dev-cuda), "timeline"
#                                  one replay's kernels and gaps, by kind (tests/gpu/timeline.py:
#                                  CUPTI through torch.profiler; TIMELINE_DTYPES, TIMELINE_BATCHES),
#                                  "compile" large-v3 bf16 at batch 32 beside torch.compile
#                                  (max-autotune, no CUDA graphs; about 4 min of autotuning),
#                                  "ncu" Nsight Compute on one launch of NCU_KERNELS' kernels
#                                  (NCU_DTYPE, NCU_BATCH, NCU_ATTENTION: VT_ATTENTION values, fa2 or wgmma;
#                                  about 1 min),
#                                  "transcripts" real base's embeddings of the spoken clips
#                                  in f16/bf16/fp8, decoded afterwards on the CPU by
#                                  tests/gpu/transcripts.py; "towerbench" the eleven audio-LLM towers at
#                                  real shape, ./main against each model's own pipeline on 64 x 10 s
#                                  and an hour (about 40 s a model), Ultravox needs tests/gpu/.ultravox
#                                  carried: made by tests/gpu/make-ultravox-code.sh; "serverbench"
#                                  whisper-audio-server, large-v3 bf16 -b 32, 1/8/64 clients on
#                                  10 s clips against ./main -b 32 and transformers one request
#                                  at a time: tests/gpu/server-bench.py; "serverturns" the server
#                                  pooled (--pool), the before tree's (build/before/whisper-audio-server,
#                                  carried by tests/gpu/bin-carry.sh make BEFORE_TREE) and this one's
#                                  taking turns, SERVER_ROUNDS (2) rounds, SERVER_ARGS passed on
#                                  (about 2 min); "wheel" the carried
#                                  manylinux wheel, build/carry/whisper_audio-*.whl (make test-wheel
#                                  WHEEL_OUT=build/carry), in a venv over this python, encoding on
#                                  the GPU through the system's CUDA: tests/gpu/wheel-cuda.sh;
#                                  "raybench" the Ray
#                                  example's GPU actors on 1000 x 5 s against ./main and its CPU
#                                  actors, first its command with Ray not running: tests/gpu/ray-bench.py,
#                                  RAY_ARGS passed on (issue 52's run: RAY_ARGS='--files 10000
#                                  --gpu-actors-per-gpu 1 --cpu-files 0'), needs Ray carried: the parts
#                                  build/carry/ray-* made by tests/gpu/ray-carry.sh download);
#                                  "stream" main --stream's latency: raw PCM in 20 ms pieces at
#                                  STREAM_SPEED x real time (default 1: real time, about 3 min),
#                                  base and large-v3, each window's rows against one forward + 50 ms
#                                  of its last sample (tests/gpu/stream-latency.py; STREAM_SIZES,
#                                  STREAM_DTYPE)
#   PARITY_SIZES=tiny,base,...     COMPARE_SIZES=large-v3   COMPARE_BATCHES=1,8,32
#   E2E_SIZES=base,large-v3   E2E_ROWS='wav*,flac*'   E2E_ARGS='--files 500 --tf-files 96' (tests/gpu/e2e.py)
#
# Compressed audio on the GPU machine, which has no audio library, no soundfile and no encoder:
# tests/gpu/make-audio-carry.sh, run on a Debian 12 machine with apt-get and PyPI, makes
# build/carry/audio (about 6 MiB: Debian's libFLAC, libmpg123, opusfile, vorbisfile packages
# unpacked, soundfile/cffi/pycparser wheels, 5 s clips; tests/gpu/check-audio-carry.sh checks it
# there with the system's own libraries hidden). Carry it (the device tool's carry
# ["build/carry/audio"]): before the build this script sources tests/gpu/audio-env.sh on it
# (CPATH, LDLIBS=-L, OGG=1 FLAC=1 MP3=1 OPUS=1, LD_LIBRARY_PATH, soundfile on PYTHONPATH) and logs
# the build's audio flags; without the folder the build is as before (WAV alone).
set -u
OUT=${OUT:-build/gpu-logs}
STEPS=${STEPS:-tests nopad parity towers compare compile timeline init inittrace stages e2e attention dev transcripts towerbench serverbench serverturns wheel raybench stream}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
has() { [[ " $STEPS " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' | tee -a "$OUT/gpu.txt"
nvcc --version | tail -n 2 | tee -a "$OUT/gpu.txt"
# the carried decoders and soundfile (tests/gpu/make-audio-carry.sh), when they travelled
# shellcheck source=tests/gpu/audio-env.sh
# (sourced, not in a pipe: a pipe's subshell would keep the variables to itself)
if [ -d build/carry/audio ]; then
    . tests/gpu/audio-env.sh build/carry/audio >"$OUT/audio-env.txt" 2>&1
    tee -a "$OUT/gpu.txt" <"$OUT/audio-env.txt"
fi

# the programs: built here, or built on the development machine and carried (tests/gpu/bin-carry.sh,
# build/carry/bin.tar.xz: the device time goes to the tests; a before tree travels in it too)
PROGRAMS="all build/test-all"     # (make all builds the programs, not the test binary)
if [ -f build/carry/bin.tar.xz ]; then
    tests/gpu/bin-carry.sh install | tee -a "$OUT/gpu.txt"
    export LD_LIBRARY_PATH=$PWD/build/carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    PROGRAMS=
fi
make -j16 $PROGRAMS test-models >"$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log"; exit 1; }
[ -z "$PROGRAMS" ] ||
    echo "build ok; audio decoders built in: $(grep -o -- '-DWHISPER_AUDIO_\(OGG\|FLAC\|MP3\|OPUS\)\b' build/flags | sed 's/-DWHISPER_AUDIO_//' | xargs)" |
    tee -a "$OUT/gpu.txt"
ldd ./main | grep -E 'FLAC|mpg123|opusfile|vorbisfile' | tee -a "$OUT/gpu.txt"
# dev/cuda's program (not in make all): carried with the others, or built here when a step wants it
if { has dev || has attention; } && [ ! -x build/dev/attention ]; then
    make -j16 dev-cuda >>"$OUT/build.log" 2>&1 || { echo "dev-cuda: the build failed"; tail -n 10 "$OUT/build.log"; }
fi

if has tests; then
    # TEST_ARGS: doctest's, e.g. TEST_ARGS='-tc=*cuda*,*CUDA*' for the CUDA cases alone (split, not globbed)
    read -r -a targs <<<"${TEST_ARGS:-}"
    if ! WA_REQUIRE_GPU=1 WA_MAIN=./main build/test-all "${targs[@]}" >"$OUT/tests.log" 2>&1; then
        # find what failed: each test case in a process of its own
        n=$(build/test-all "${targs[@]}" -ltc | grep -v '^\[doctest\]' | grep -vc '^===')
        for i in $(seq 1 "$n"); do
            WA_REQUIRE_GPU=1 WA_MAIN=./main timeout 300 build/test-all "${targs[@]}" --first="$i" --last="$i" >"$OUT/case.log" 2>&1 ||
                { echo "test case $i failed:"; grep -E "TEST CASE|ERROR|FATAL|Fatal|MESSAGE" "$OUT/case.log" | head -n 8; }
        done | tee "$OUT/tests-by-case.log"
    fi
    grep -E "MESSAGE: (f16|bf16) on|skipped|ERROR|FATAL" "$OUT/tests.log" | head -n 20
    tail -n 3 "$OUT/tests.log"
    ./main -m build/micro-80-f32.gguf -f samples/speech_16k.wav --device cuda -o "$OUT/main-cuda.npy" 2>&1 | tail -n 4
fi
has nopad && { python3 tests/gpu/make-nopad-reference.py 2>&1 | tail -n 6; }
has parity && python3 tests/gpu/parity.py --sizes "${PARITY_SIZES:-tiny,base,small,medium,large-v3}" --out "$OUT" 2>&1 | tee "$OUT/parity.log" | grep -v "^|"
has towers && python3 tests/gpu/towers.py 2>&1 | tee "$OUT/towers.log" | grep -v "^|"
# with a before tree carried (build/before/bench, tests/gpu/bin-carry.sh make TREE), compare.py times it too
has compare && python3 tests/gpu/compare.py --sizes "${COMPARE_SIZES:-large-v3}" --batches "${COMPARE_BATCHES:-1,8,32}" \
    --dtypes "${COMPARE_DTYPES:-f16,bf16,fp8}" $([ -x build/before/bench ] && echo --before build/before) --out "$OUT" 2>&1 |
    tee "$OUT/compare.log" | grep -v "^|"
has compile && mkdir -p "$OUT/compile" && python3 tests/gpu/compare.py --sizes large-v3 --batches 32 --dtypes bf16 --compile-batches 32 \
    --out "$OUT/compile" 2>&1 | tee "$OUT/compile.log" | grep -v "^|"
has timeline && python3 tests/gpu/timeline.py --dtypes "${TIMELINE_DTYPES:-bf16,fp8}" --batches "${TIMELINE_BATCHES:-1,32}" \
    --out "$OUT" 2>&1 | tee "$OUT/timeline.log" | grep -v "^|"
# "ncu": Nsight Compute on one launch of each kernel of NCU_KERNELS (regexes on the demangled
# names as ncu writes them, no spaces: template arguments read "(int)5, (bool)1") in large-v3's forward (./bench, NCU_DTYPE: fp8 runs both default kernels,
# NCU_BATCH, NCU_ATTENTION as VT_ATTENTION), past the warm-up's
# launches: its speed of light, occupancy, warp states and scheduler printed, the report under
# $OUT/ncu.tar.xz (ncu serialises kernels and replays each section: a few seconds a launch)
if has ncu; then
    model=build/large-v3-random.gguf
    [ -f $model ] || python3 convert/convert-hf-to-gguf.py --random large-v3 -o $model --outtype f16 2>/dev/null
    mkdir -p "$OUT/ncu"
    for k in ${NCU_KERNELS:-attention_wgmma quantize_rows_kernel<.*bool.1>}; do
        for va in ${NCU_ATTENTION:-default}; do
            tag=$(echo "$k" | tr -c 'A-Za-z0-9_\n' _)-$va-${NCU_DTYPE:-fp8}-b${NCU_BATCH:-32}
            ( [ "$va" = default ] || export VT_ATTENTION=$va
              ncu --set full --kernel-name-base demangled -k "regex:$k" --launch-skip 40 --launch-count 1 -f -o "$OUT/ncu/$tag" \
                  ./bench -m $model --device cuda --dtype "${NCU_DTYPE:-fp8}" -b "${NCU_BATCH:-32}" -n 2 >"$OUT/ncu/$tag.log" 2>&1 ) ||
                { echo "ncu $tag failed:"; tail -n 5 "$OUT/ncu/$tag.log"; continue; }
            ncu --import "$OUT/ncu/$tag.ncu-rep" --page details --section SpeedOfLight --section Occupancy \
                --section WarpStateStats --section SchedulerStats --section LaunchStats 2>&1 | tee "$OUT/ncu/$tag.txt" |
                grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issued Warp|No Eligible|Eligible Warps"
        done
    done
    (cd "$OUT" && tar -cJf ncu.tar.xz ncu && rm -r ncu)
fi
# "beforeafter": ./main of the carried before tree and of this one, interleaved on the same inputs
has beforeafter && python3 tests/gpu/before-after.py --before build/before --sizes "${BA_SIZES:-base}" --cases "${BA_CASES:-pooled}" \
    --out "$OUT" 2>&1 | tee "$OUT/before-after.log" | grep -v "^|"
# "init": main's load and init (large-v3 and base, batch 1 and 32), beside the before tree's when carried
has init && python3 tests/gpu/init-bench.py $([ -x build/before/main ] && echo --before build/before) --out "$OUT" 2>&1 |
    tee "$OUT/init-bench.log" | grep -v "^|"
has inittrace && python3 tests/gpu/init-trace.py --out "$OUT" 2>&1 | tee "$OUT/init-trace.log" | grep -v "^|"
has stages && python3 tests/gpu/stages.py 2>&1 | tee "$OUT/stages.log"
has e2e && python3 tests/gpu/e2e.py --sizes "${E2E_SIZES:-base,large-v3}" --out "$OUT" ${E2E_ARGS:-} 2>&1 | tee "$OUT/e2e.log" | grep -v "^|"
has attention && python3 tests/gpu/attention.py --batches "${ATTENTION_BATCHES:-1,32}" 2>&1 | tee "$OUT/attention.log" | grep -v "^|"
# "dev": dev/cuda/attention.cu, the attention versions checked (CPU in double, the library's kernel) and timed
if has dev; then
    if [ -x build/dev/attention ]; then
        # shellcheck disable=SC2086
        build/dev/attention ${DEV_BATCHES:-1 32} >"$OUT/dev.log" 2>&1 || echo "dev: build/dev/attention exited $?"
        grep -v "^bench" "$OUT/dev.log"
    else
        echo "dev: skipped: no build/dev/attention" | tee "$OUT/dev.log"
    fi
fi
has towerbench && python3 tests/gpu/tower-bench.py --out "$OUT" 2>&1 | tee "$OUT/towerbench.log" | grep -v "^|"
has stream && python3 tests/gpu/stream-latency.py --sizes "${STREAM_SIZES:-base,large-v3}" --dtype "${STREAM_DTYPE:-f16}" \
    --speed "${STREAM_SPEED:-1}" 2>&1 | tee "$OUT/stream.log" | grep -v "^|"
has serverbench && python3 tests/gpu/server-bench.py --out "$OUT" 2>&1 | tee "$OUT/serverbench.log" | grep -v "^|"
if has serverturns; then
    # the batch fill, windows/s and p50/p99 of the two servers on the same clips, one after the other
    for r in $(seq 1 "${SERVER_ROUNDS:-2}"); do
        for t in before after; do
            srv=./whisper-audio-server
            [ $t = after ] || srv=build/before/whisper-audio-server
            [ -x "$srv" ] || { echo "serverturns: no $srv" | tee -a "$OUT/serverturns.log"; continue; }
            echo "== $t ($srv), round $r" >>"$OUT/serverturns.log"
            # the forward alone (./bench) once
            python3 tests/gpu/server-bench.py --pool --no-transformers --server "$srv" --out "$OUT/serverturns-$t-$r" \
                $([ "$r$t" = 1before ] || echo --no-bench) ${SERVER_ARGS:-} >>"$OUT/serverturns.log" 2>&1
        done
    done
    grep "^==\|clients (\|main -b\|forward alone\|^serverbench" "$OUT/serverturns.log" | sed 's/; checks:.*dispatcher/; dispatcher/'
fi
has wheel && OUT="$OUT" tests/gpu/wheel-cuda.sh 2>&1 | tee "$OUT/wheel.log"
if has raybench; then
    # Ray from the carried wheels (installed into /tmp/site once a machine), else skipped
    python3 -c 'import ray' 2>/dev/null || { [ -d /tmp/site/ray ] || tests/gpu/ray-carry.sh install >"$OUT/raycarry.log" 2>&1; } &&
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
    if python3 -c 'import ray, pyarrow' 2>/dev/null; then
        [ -z "$PROGRAMS" ] || make -j16 main build/libwhisper-audio.so >>"$OUT/build.log" 2>&1
        python3 tests/gpu/ray-bench.py --main "$PWD/main" --out "$OUT" ${RAY_ARGS:-} 2>&1 | tee "$OUT/raybench.log" | grep -v "^|"
    else
        echo "ray-bench: skipped: Ray is not importable (carry build/carry/ray-*: tests/gpu/ray-carry.sh)" | tee "$OUT/raybench.log"
        tail -n 3 "$OUT/raycarry.log" 2>/dev/null
    fi
fi
# real base (carried: build/carry/base-f16.gguf, made by tests/gpu/transcripts.py --make-cpu) on
# the spoken clips and speech_16k: <clip>.cuda-<dtype>.npy in $OUT/transcripts-<dtype>.tar, for
# transcripts.py (and speech_16k's against tests/data/ct2/base.speech_16k.ref.npy, float64)
if has transcripts; then
    if [ -f build/carry/base-f16.gguf ]; then
        for dt in f16 bf16 fp8; do
            mkdir -p "$OUT/transcripts/$dt"
            ./main -m build/carry/base-f16.gguf $(printf -- '-f %s ' tests/data/audio/speech/*.wav samples/speech_16k.wav) \
                --device cuda --dtype "$dt" --no-progress -o "$OUT/transcripts/$dt/" >"$OUT/transcripts/$dt.log" 2>&1 ||
                { echo "transcripts: main --dtype $dt failed"; tail -n 5 "$OUT/transcripts/$dt.log"; continue; }
            # main -o DIR/ keeps each input's relative path under DIR: flatten to <clip>.cuda-<dtype>.npy
            find "$OUT/transcripts/$dt" -name '*.npy' | while read -r f; do mv "$f" "$OUT/transcripts/$(basename "$f" .npy).cuda-$dt.npy"; done
            rm -r "$OUT/transcripts/$dt"
        done
        # one tar per dtype: the device tool brings back at most 8 files of 16 MiB
        for dt in f16 bf16 fp8; do
            (cd "$OUT/transcripts" && tar -cf "../transcripts-$dt.tar" ./*.cuda-$dt.npy && rm ./*.cuda-$dt.npy)
        done
        rm -r "$OUT/transcripts"
        echo "transcripts: $OUT/transcripts-{f16,bf16,fp8}.tar (the clips and speech_16k)"
    else
        echo "transcripts: skipped (no build/carry/base-f16.gguf; tests/gpu/transcripts.py --make-cpu makes it)"
    fi
fi

echo
has tests && { echo "tests:"; tail -n 3 "$OUT/tests.log"; }
has parity && grep "^|\|^parity" "$OUT/parity.log"
has towers && grep "^|\|^towers" "$OUT/towers.log"
has stages && cat "$OUT/stages.log"
has init && grep "^|\|^init-bench: \(large\|base\|the floor\)\|^the floor" "$OUT/init-bench.log"
has inittrace && grep "^|" "$OUT/init-trace.log"
has compare && grep "^|\|^compare" "$OUT/compare.log"
has compile && grep "^|\|^torch.compile" "$OUT/compile.log"
has timeline && grep "^|\|^timeline\|^largest" "$OUT/timeline.log"
has e2e && grep "^|\|^ratio\|^e2e: \(build\|disk\|.* in all\|.*skipped\)" "$OUT/e2e.log"
has attention && grep "^|\|^attention" "$OUT/attention.log"
has dev && grep "^bench\|^dev" "$OUT/dev.log"
has towerbench && grep "^|\|^towerbench" "$OUT/towerbench.log"
has stream && grep "^|\|^stream-latency" "$OUT/stream.log"
has serverbench && grep "^|\|^serverbench\|^server-bench: skipped" "$OUT/serverbench.log"
has wheel && grep "^wheel" "$OUT/wheel.log"
has raybench && grep "^|\|^target\|^ray-bench: skipped\|FAILED" "$OUT/raybench.log"
exit 0
