#!/usr/bin/env bash
# tests/gpu/make-audio-carry.sh - makes build/carry/audio (ignored by git, never committed): what
# the GPU machine needs for tests/gpu/e2e.py's compressed-audio rows. That machine reaches no
# package registry and has none of the audio libraries, no soundfile and no encoder, so this runs
# HERE (Debian 12, apt-get and PyPI reachable) and the folder travels: the device tool's
# carry ["build/carry/audio"]. tests/gpu/run-all.sh sources tests/gpu/audio-env.sh on it.
#
#   tests/gpu/make-audio-carry.sh [DIR]        (default build/carry/audio)
#
# What it holds (about 5 MiB):
#   root/      Debian 12's -dev and runtime packages of the decoders the Makefile builds with
#              (lists.mk's AUDIO_FORMATS: libFLAC, libmpg123, opusfile + opus + ogg, vorbisfile +
#              vorbis), `apt-get download` + `dpkg -x`, less their docs, static libraries and what
#              the decoders do not need (vorbisenc, opusfile's libopusurl, mpg123's out123). Their
#              .pc files say prefix=${pcfiledir}/../../.., so pkg-config works wherever root/ lies.
#              Only libc and libm are needed from the system (glibc >= 2.33).
#   wheels/    soundfile (its wheel bundles libsndfile 1.2 with FLAC, Vorbis, Opus and MP3), cffi
#              (for CPython 3.12, the GPU machine's, and this machine's python3 for the check here;
#              WHEEL_PYTHONS="3.12 3.13" chooses others: the install picks the one that fits) and
#              pycparser, from PyPI:
#              transformers' side decodes with soundfile. numpy and typing-extensions, soundfile's
#              other needs, are on that machine already.
#   clips/     5 s clips that e2e.py lists repeatedly and chains into its long inputs:
#              clip_44k1_stereo.wav    44.1 kHz stereo s16: the first 5 s of tests/data's espeak-ng
#                                      speech (speech_44k1_stereo_s16.wav, whose channels are equal)
#                                      plus pink noise at -40 dBFS drawn for each channel (so that
#                                      the channels differ, as real stereo does); sox 14.4
#              clip_44k1_stereo.flac   that WAV, flac 1.4.2 -5 (the default level)
#              clip_48k.mp3            that WAV at 48 kHz (sox's rate -v), LAME 3.100 -b 128 CBR, -t:
#                                      no Xing/LAME frame and no ID3 tag, frames alone, so that copies
#                                      concatenate into one stream (a Xing frame would state one
#                                      copy's length)
#              clip_48k_a.opus, clip_48k_b.opus
#                                      the 48 kHz WAV, opusenc (opus-tools 0.2, libopus 1.3.1)
#                                      --bitrate 96, Ogg serial numbers 1 and 2: concatenated Ogg
#                                      files are one chained stream, and each link's serial number
#                                      must differ from the one before it (a reader finds the next
#                                      link by its new serial), so e2e.py alternates a, b
#   PROVENANCE the packages' names and versions, the wheels, the tools' versions, sha256 of all
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DST=${1:-$ROOT/build/carry/audio}
DEBS="libflac-dev libflac12 libmpg123-dev libmpg123-0 libopusfile-dev libopusfile0 libopus-dev libopus0
      libogg-dev libogg0 libvorbis-dev libvorbis0a libvorbisfile3"
WHEELS="soundfile==0.14.0 cffi==2.1.1 pycparser==3.12"
# KINDS.md: the GPU machine's python3 is 3.12.3; this machine's too, for tests/gpu/check-audio-carry.sh
WHEEL_PYTHONS=${WHEEL_PYTHONS:-$(printf '%s\n' 3.12 "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" | sort -u | xargs)}
TOOLS="lame opus-tools flac sox"
PIP=${PIP:-python3 -m pip}
SRC=$ROOT/tests/data/audio/speech_44k1_stereo_s16.wav

SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
missing=""
for t in $TOOLS; do dpkg -s "$t" >/dev/null 2>&1 || missing="$missing $t"; done
$SUDO apt-get update -qq
[ -z "$missing" ] || { echo "installing:$missing"; $SUDO apt-get install -y -qq $missing >/dev/null; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
OUT=$TMP/audio
mkdir -p "$OUT/root" "$OUT/wheels" "$OUT/clips" "$TMP/debs"

# ---- the decoders: Debian's packages unpacked, not installed ----------------------------------
(cd "$TMP/debs" && apt-get download -q $DEBS 2>&1 | grep -v "^Get:" || true)
for d in "$TMP"/debs/*.deb; do dpkg -x "$d" "$OUT/root"; done
rm -rf "$OUT/root/usr/share"                                  # docs, changelogs, man pages
find "$OUT/root" -name '*.a' -delete                          # the build links the shared libraries
rm -f "$OUT"/root/usr/lib/x86_64-linux-gnu/libopusurl.so*    # opusfile's http part (needs libssl)
find "$OUT/root" -xtype l -delete                             # -dev symlinks to libraries left out
                                                              # (libmpg123-dev's libout123, libsyn123,
                                                              # libvorbis-dev's libvorbisenc)
# relocatable .pc files: every /usr in them becomes the .pc file's own root; those of the
# libraries left out go
for pc in "$OUT"/root/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc; do
    lib=$(sed -n 's/^Libs:.* -l\([^ ]*\).*/\1/p' "$pc")
    [ -e "$OUT/root/usr/lib/x86_64-linux-gnu/lib$lib.so" ] || { rm "$pc"; continue; }
    sed -i 's|=/usr\b|=${pcfiledir}/../../..|' "$pc"
done

# ---- soundfile for transformers' side --------------------------------------------------------
for v in $WHEEL_PYTHONS; do
    $PIP download -q --no-deps --only-binary=:all: --python-version "$v" --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d "$OUT/wheels" $WHEELS
done

# ---- the clips -------------------------------------------------------------------------------
C=$OUT/clips
# sox's synth draws the same noise for every channel of one file: draw one file a channel
sox -n -r 44100 -c 1 -b 16 "$TMP/noise_l.wav" synth 5 pinknoise gain -40
sox -n -r 44100 -c 1 -b 16 "$TMP/noise_r.wav" synth 5 pinknoise gain -40
sox -M "$TMP/noise_l.wav" "$TMP/noise_r.wav" "$TMP/noise.wav"
sox -m -v 1 "$SRC" -v 1 "$TMP/noise.wav" -b 16 "$C/clip_44k1_stereo.wav" trim 0 5
sox "$C/clip_44k1_stereo.wav" -r 48000 "$TMP/clip_48k.wav" rate -v
flac -s -5 -o "$C/clip_44k1_stereo.flac" "$C/clip_44k1_stereo.wav"
lame --quiet -t -b 128 "$TMP/clip_48k.wav" "$C/clip_48k.mp3"
opusenc --quiet --bitrate 96 --serial 1 "$TMP/clip_48k.wav" "$C/clip_48k_a.opus"
opusenc --quiet --bitrate 96 --serial 2 "$TMP/clip_48k.wav" "$C/clip_48k_b.opus"
# the channels must differ (the noise is drawn for each), and the MP3 must start with a frame
diff_rms=$(sox "$C/clip_44k1_stereo.wav" -n remix 1v1,2v-1 stat 2>&1 | awk '/RMS +amplitude/ {print $3}')
awk -v r="$diff_rms" 'BEGIN { exit !(r > 1e-4) }' || { echo "$0: the clip's channels are equal (L-R RMS $diff_rms)" >&2; exit 1; }
[ "$(head -c 2 "$C/clip_48k.mp3" | od -An -tx1 | tr -d ' ')" = fffb ] || { echo "$0: clip_48k.mp3 does not start with an MPEG frame" >&2; exit 1; }

# ---- provenance ------------------------------------------------------------------------------
{
    echo "made by tests/gpu/make-audio-carry.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ), $(. /etc/os-release && echo "$PRETTY_NAME")"
    echo; echo "Debian packages (apt-get download, dpkg -x into root/):"
    for d in "$TMP"/debs/*.deb; do echo "  $(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version) $(basename "$d")"; done
    echo; echo "wheels (PyPI, pip download --no-deps for CPython $WHEEL_PYTHONS): $WHEELS"
    echo; echo "clips: from tests/data/audio/speech_44k1_stereo_s16.wav (espeak-ng speech, tests/data/README.md)"
    echo "  $(sox --version 2>&1 | head -n 1); $(flac --version); $(lame --version | head -n 1); $(opusenc --version | head -n 1)"
    echo "  L-R RMS of clip_44k1_stereo.wav: $diff_rms"
    echo; echo "sha256:"
    (cd "$OUT" && find clips wheels -type f | sort | xargs sha256sum | sed 's/^/  /')
} > "$OUT/PROVENANCE"

rm -rf "$DST" && mkdir -p "$(dirname "$DST")" && mv "$OUT" "$DST"
echo "wrote $DST ($(du -sh "$DST" | cut -f1)): $(ls "$DST/clips" | xargs); wheels for CPython $WHEEL_PYTHONS"
