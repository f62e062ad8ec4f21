#!/usr/bin/env bash
# make-speech-clips.sh - the spoken test clips in tests/data/audio/speech/: four short English
# sentences (numbers, names) synthesised by espeak-ng, 16 kHz mono s16 WAV, and texts.tsv
# (clip<TAB>text spoken), the reference text tests/gpu/transcripts.py compares transcripts with.
#
#   bash tests/data/make-speech-clips.sh        (run from the repository root)
#
# Made on Debian 12 with espeak-ng 1.51+dfsg-10+deb12u2 and sox 14.4.2+git20190427-3.5
# (`apt-get install -y espeak-ng sox`). espeak-ng writes 22050 Hz mono s16; sox resamples it to
# 16 kHz (its default high-quality `rate`, no dither: -D) and adds 0.3 s of silence before and
# after (speech from the first sample loses its first word in Whisper base), so the same versions
# give the same bytes. The sentences are ones real Whisper base transcribes word for word from
# our CPU embeddings (tests/gpu/transcripts.py): harder ones ("Peter", "platform 9 at 6") it
# mishears, and a clip misheard at f32 says little about a lower precision.
set -euo pipefail
OUT=tests/data/audio/speech
for tool in espeak-ng sox; do
    command -v "$tool" >/dev/null || { echo "error: $tool not found; apt-get install -y espeak-ng sox" >&2; exit 1; }
done
mkdir -p "$OUT"
T=$(mktemp -d "${TMPDIR:-/tmp}/speech-clips.XXXXXX")
trap 'rm -rf "$T"' EXIT

# clip name | espeak-ng voice | words per minute | text
CLIPS=(
    "market|en-us|150|On Friday, John Wilson bought 12 apples and 3 oranges at the market."
    "train|en-gb|150|The train to London leaves from platform 12 at 7 in the morning."
    "phone|en-us+f3|120|Please call Maria Garcia at room 204 before noon."
    "moon|en-us+m3|155|In 1969, Neil Armstrong walked on the Moon while millions watched on television."
)

: > "$OUT/texts.tsv"
for entry in "${CLIPS[@]}"; do
    IFS='|' read -r name voice wpm text <<< "$entry"
    espeak-ng -v "$voice" -s "$wpm" -w "$T/$name.wav" "$text"
    sox -D "$T/$name.wav" -r 16000 -c 1 -b 16 -e signed-integer "$OUT/$name.wav" pad 0.3 0.3
    printf '%s\t%s\n' "$name" "$text" >> "$OUT/texts.tsv"
    printf '%-8s %-10s %3s wpm  %5.2f s  %s\n' "$name" "$voice" "$wpm" "$(soxi -D "$OUT/$name.wav")" "$text"
done
