#!/usr/bin/env bash
# tests/gpu/check-audio-carry.sh - checks build/carry/audio (tests/gpu/make-audio-carry.sh) here, as
# the GPU machine will use it: in a private mount namespace (root: unshare -m) where this system's
# own audio headers and libraries are hidden (empty folders and files bound over them), it sources
# tests/gpu/audio-env.sh, builds main and bench into build-carrycheck with CUDA=0, shows the
# build's audio flags and where ldd finds the libraries, and decodes every clip, and e2e.py's
# long MP3 and Opus (short here), with main (the micro model on the CPU) and with the carried
# soundfile; and a chained Ogg Opus stream, for the record.
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
# e2e.py's long inputs, short: 4 copies of the MP3's frames; the Opus clip's packets 4 times in one
# logical stream (e2e.opus_long); and, for the record, the Opus clips chained (links a, b, a, b)
cat "$C/clip_48k.mp3" "$C/clip_48k.mp3" "$C/clip_48k.mp3" "$C/clip_48k.mp3" > "$work/long.mp3"
python3 -c 'import sys; sys.path.insert(0, "tests/gpu"); import e2e; e2e.opus_long(sys.argv[2], sys.argv[1], 4)' \
    "$C/clip_48k_a.opus" "$work/long.opus"
cat "$C/clip_48k_a.opus" "$C/clip_48k_b.opus" "$C/clip_48k_a.opus" "$C/clip_48k_b.opus" > "$work/chained.opus"
fail=0
for f in "$C"/clip_* "$work/long.mp3" "$work/long.opus" "$work/chained.opus"; do
    j=$(build-carrycheck/main -m build/micro-80-f32.gguf --device cpu -t 2 --pool mean --json -q -o "$work/out.npy" "$f") ||
        { echo "main failed on $f"; fail=1; continue; }
    python3 -c 'import json, sys; f = json.loads(sys.argv[1])["files"][0]
print("main:      %-22s %-12s %6d Hz %d ch %7.3f s" % (sys.argv[2], f["format"], f["sample_rate"], f["channels"], f["seconds"]))' "$j" "$(basename "$f")"
    # soundfile read block by block until a read comes back empty: sf.read and blocks() trust
    # the frame count, which libsndfile gives as 2^63 - 1 for a chained stream
    python3 -c 'import soundfile as sf, sys
with sf.SoundFile(sys.argv[1]) as f:
    n = 0
    while len(b := f.read(65536, dtype="float32")):
        n += len(b)
    print("soundfile: %-22s %-12s %6d Hz %d ch %7.3f s" % (sys.argv[2], f.subtype, f.samplerate, f.channels, n / f.samplerate))' \
        "$f" "$(basename "$f")" || { echo "soundfile failed on $f"; fail=1; }
done
echo "(libsndfile 1.2, so soundfile, reads a chained Ogg stream's first link alone: chained.opus gives 5 s of 20;"
echo " e2e.py's long Opus is one logical stream, long.opus, which both read whole)"
ls build-carrycheck/bench >/dev/null
[ $fail = 0 ] && echo "check-audio-carry: ok" || { echo "check-audio-carry: FAILED"; exit 1; }
