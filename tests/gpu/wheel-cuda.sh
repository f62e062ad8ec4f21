#!/usr/bin/env bash
# tests/gpu/wheel-cuda.sh - the manylinux wheel's CUDA path on a GPU machine (issue 25), from the
# repository root, after run-all.sh's build (build/main, build/micro-80-f32.gguf). The wheel is
# carried: build/carry/whisper_audio-*-manylinux_*.whl, made on the CPU machine by
#   make test-wheel WHEEL_OUT=build/carry
# It goes into a venv over this python (--system-site-packages: its numpy, and the nvidia wheels
# torch brought; nothing comes from a registry), and encodes on the GPU: with the system's CUDA
# (WHISPER_AUDIO_NVIDIA_LIB_DIRS empty, so no wheel folder is looked in), then as installed (the
# package points the library at nvidia/cu13/lib when this python has nvidia-cublas 13), each
# against the wheel's own CPU result and ./main --device cuda; it prints which libcublasLt each
# run loaded (/proc/self/maps). Lines start with "wheel:"; exit 1 on a failure.
set -u
OUT=${OUT:-build/gpu-logs}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
fail() { echo "wheel: FAILED: $*"; exit 1; }
whl=$(ls build/carry/whisper_audio-*-manylinux_*.whl 2>/dev/null | tail -n 1)
[ -n "$whl" ] || { echo "wheel: skipped (no build/carry/whisper_audio-*-manylinux_*.whl: make test-wheel WHEEL_OUT=build/carry makes it)"; exit 0; }
ROOT=$(pwd)
MODEL=$ROOT/build/micro-80-f32.gguf
AUDIO=$ROOT/samples/speech_16k.wav
[ -f "$MODEL" ] && [ -x build/main ] || fail "no build/main or $MODEL (run-all.sh's build makes them)"

echo "wheel: $(basename "$whl"); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
echo "wheel: this python's nvidia packages: $(python3 -m pip list 2>/dev/null | awk 'tolower($1) ~ /^nvidia-/ { printf "%s %s, ", $1, $2 }')"
python3 - <<'PY'
import glob, importlib.util, os
spec = importlib.util.find_spec("nvidia")
roots = list(spec.submodule_search_locations) if spec and spec.submodule_search_locations else []
found = [f for r in roots for f in glob.glob(os.path.join(r, "*", "lib", "libcublasLt.so*"))]
print("wheel: libcublasLt in this python's nvidia wheels:", ", ".join(found) or "none")
PY
echo "wheel: the system's: $(ldconfig -p | awk '$1 ~ /^libcublasLt\.so/ { printf "%s ", $NF }')$(ls /usr/local/cuda/lib64/libcublasLt.so.* 2>/dev/null | tr '\n' ' ')"

V=build/wheel-venv
rm -rf "$V"
python3 -m venv --system-site-packages "$V" || fail "python3 -m venv"
# this python may be a venv itself (torch's, on the GPU machine): --system-site-packages then
# reaches only its base interpreter's, so its own site-packages are added by a .pth file
"$V/bin/python" -c 'import numpy' 2>/dev/null ||
    python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$("$V/bin/python" -c 'import site; print(site.getsitepackages()[0])')/parent.pth"
"$V/bin/pip" install -q --no-index --no-deps --disable-pip-version-check "$whl" >"$OUT/wheel-install.log" 2>&1 ||
    { cat "$OUT/wheel-install.log"; fail "pip install $(basename "$whl")"; }
./build/main -m "$MODEL" -f "$AUDIO" -o build/wheel-main-cuda.npy --device cuda --no-progress >/dev/null 2>&1 ||
    fail "./main --device cuda"

# one encode on the GPU in a fresh process: NAME [ENV=VALUE...]
encode() {
    local name=$1; shift
    (cd "$OUT" && env -u WHISPER_AUDIO_LIBRARY -u WHISPER_AUDIO_CUBLASLT -u PYTHONPATH "$@" "$ROOT/$V/bin/python" - "$MODEL" "$AUDIO" \
        "$ROOT/build/wheel-main-cuda.npy" "$name" <<'PY'
import os, sys
import numpy as np
import whisper_audio as wa
model, audio, main_npy, name = sys.argv[1:]
assert "site-packages" in wa.__file__, wa.__file__
cpu = wa.Model(model, device="cpu").encode(audio)
with wa.Model(model, device="cuda") as m:
    gpu = m.encode(audio)
    backend = m.backend
lt = sorted({line.split()[-1] for line in open("/proc/self/maps") if "libcublasLt" in line})
ref = np.load(main_npy)
err = float(np.linalg.norm(gpu.astype(np.float64) - cpu) / np.linalg.norm(cpu))
print(f"wheel: {name}: {backend} encodes {gpu.shape}, rel. L2 vs the wheel's CPU {err:.2e}, "
      f"{'bit for bit' if np.array_equal(gpu, ref) else 'max |diff| %.2e' % float(np.abs(gpu - ref).max())} vs ./main --device cuda; "
      f"cuBLASLt: {', '.join(lt) or 'none mapped'}; WHISPER_AUDIO_NVIDIA_LIB_DIRS={os.environ.get('WHISPER_AUDIO_NVIDIA_LIB_DIRS', '(unset)')!r}")
assert lt, "no libcublasLt mapped"
assert name != "system CUDA" or not any("site-packages" in p for p in lt), "a wheel's cuBLASLt, not the system's"
assert err < 1e-2, f"the GPU result is off: {err}"
PY
    ) || fail "$name"
}
encode "system CUDA" WHISPER_AUDIO_NVIDIA_LIB_DIRS=
encode "as installed"
echo "wheel: ok"
