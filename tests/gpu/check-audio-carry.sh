#!/usr/bin/env bash
# tests/gpu/check-audio-carry.sh - checks build/carry/audio (tests/gpu/make-audio-carry.sh) here, as
# the GPU machine will use it: in a private mount namespace (root: unshare -m) where this system's
# own audio headers and libraries are hidden (empty folders and files bound over them), it sources
# tests/gpu/audio-env.sh, builds main and bench into build-carrycheck with CUDA=0, shows the
# build's audio flags and where ldd finds the libraries, decodes every clip with main (the micro
# model on the CPU) and with the carried soundfile, and reads the chained Opus and concatenated
# MP3 inputs that e2e.py makes as one input each.
#
#   tests/gpu/check-audio-carry.sh [DIR]       (default build/carry/audio)
#
# python3 must have numpy (soundfile needs it): PATH=/path/to/venv/bin:$PATH ... The wheels go to
# a scratch folder, not into DIR, which stays as it travels.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=$(cd "${1:-$ROOT/build/carry/audio}" && pwd)
if [ "${WA_HIDDEN:-}" != 1 ]; then
    exec unshare -m env WA_HIDDEN=1 bash "$0" "$DIR"
fi
cd "$ROOT"
# ---- hide the system's decoders (this namespace only) ---------------------------------------
empty=$(mktemp -d)
for d in /usr/include/FLAC /usr/include/ogg /usr/include/opus /usr/include/vorbis; do
    [ -d "$d" ] && mount --bind "$empty" "$d"
done
for f in /usr/include/x86_64-linux-gnu/mpg123.h /usr/include/mpg123.h \
         /usr/lib/x86_64-linux-gnu/lib{FLAC,mpg123,ogg,opus,opusfile,vorbis,vorbisfile}.so*; do
    [ -f "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"
done
python3 -c 'import soundfile' 2>/dev/null && { echo "soundfile is importable before the carry: the check would prove nothing"; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work" "$empty"' EXIT
# shellcheck source=tests/gpu/audio-env.sh
WA_AUDIO_SITE=$work/site . tests/gpu/audio-env.sh "$DIR"
make -j2 CUDA=0 BUILD=build-carrycheck build-carrycheck/main build-carrycheck/bench build/micro-80-f32.gguf >/tmp/check-audio-carry.log 2>&1 ||
    { tail -n 20 /tmp/check-audio-carry.log; exit 1; }
echo "build flags: $(grep -o -- '-DWHISPER_AUDIO_[A-Z0-9]*' build-carrycheck/flags | tr '\n' ' ')"
ldd build-carrycheck/main | grep -E 'FLAC|mpg123|opus|ogg|vorbis'

C=$DIR/clips
# the long inputs' recipe of e2e.py, short: 4 copies of the MP3's frames; Opus links a, b, a, b
cat "$C/clip_48k.mp3" "$C/clip_48k.mp3" "$C/clip_48k.mp3" "$C/clip_48k.mp3" > "$work/chain.mp3"
cat "$C/clip_48k_a.opus" "$C/clip_48k_b.opus" "$C/clip_48k_a.opus" "$C/clip_48k_b.opus" > "$work/chain.opus"
fail=0
for f in "$C"/clip_* "$work/chain.mp3" "$work/chain.opus"; do
    j=$(build-carrycheck/main -m build/micro-80-f32.gguf --device cpu -t 2 --pool mean --json -q -o "$work/out.npy" "$f") ||
        { echo "main failed on $f"; fail=1; continue; }
    python3 -c 'import json, sys; f = json.loads(sys.argv[1])["files"][0]
print("main: %-22s %-14s %6d Hz %d ch %7.3f s" % (sys.argv[2], f["format"], f["sample_rate"], f["channels"], f["seconds"]))' "$j" "$(basename "$f")"
    python3 -c 'import soundfile as sf, sys; x, r = sf.read(sys.argv[1])
print("soundfile: %-17s %6d Hz %d ch %7.3f s" % (sys.argv[2], r, x.shape[1] if x.ndim > 1 else 1, len(x) / r))' "$f" "$(basename "$f")" ||
        { echo "soundfile failed on $f"; fail=1; }
done
ls build-carrycheck/bench >/dev/null
[ $fail = 0 ] && echo "check-audio-carry: ok" || { echo "check-audio-carry: FAILED"; exit 1; }
