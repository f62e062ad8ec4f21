#!/usr/bin/env bash
# test-embed.sh BUILD MODEL [cuda]: the consumers that make test-embed builds from copies of the
# library's file lists alone (lists.mk), run: the model alone on raw PCM, the same with the
# second set on the WAV and on a Hugging Face directory (the same numbers), the model alone's
# one-line errors for what it leaves to the second set, and with CUDA the three sets together.
set -u
build=$1 model=$2 cuda=${3:-}
n=0 failed=0
check() {   # check NAME CONDITION...
    local name=$1; shift
    if "$@"; then n=$((n + 1)); else echo "test-embed: FAILED: $name"; failed=$((failed + 1)); fi
}
values() { sed -n 's/.*emb\[0\]\[0\]\[0\.\.3\] = //p' <<<"$1"; }

raw=$("$build/embed" "$model" "$build/speech_16k.f32" 2>&1); echo "$raw"
check "the model alone encodes raw PCM" grep -q 'samples -> \[1, 1500, ' <<<"$raw"
wav=$("$build/embed-files" "$model" samples/speech_16k.wav 2>&1); echo "$wav"
check "the second set decodes the WAV to the same embeddings" test -n "$(values "$raw")" -a "$(values "$raw")" = "$(values "$wav")"
dir=$("$build/embed-files" tests/data/micro-80 "$build/speech_16k.f32" 2>&1); echo "$dir"
check "the second set loads a Hugging Face directory to the same embeddings" test "$(values "$raw")" = "$(values "$dir")"

err=$("$build/embed" "$model" samples/speech_16k.wav 2>&1); rc=$?; echo "$err"
check "the model alone names whisper-audio-input.cpp for an audio file" \
    test $rc = 1 -a "$(wc -l <<<"$err")" = 1 -a -n "$(grep 'add whisper-audio-input.cpp' <<<"$err")"
err=$("$build/embed" tests/data/micro-80 "$build/speech_16k.f32" 2>&1); rc=$?; echo "$err"
check "the model alone names whisper-audio-formats.cpp for a directory" \
    test $rc = 1 -a "$(wc -l <<<"$err")" = 1 -a -n "$(grep 'need whisper-audio-formats.cpp' <<<"$err")"
err=$("$build/embed" build/ggml/micro-80-f16.bin "$build/speech_16k.f32" 2>&1); rc=$?; echo "$err"
check "the model alone names whisper-audio-formats.cpp for a ggml file" \
    test $rc = 1 -a -n "$(grep 'not a GGUF file; .*whisper-audio-formats.cpp' <<<"$err")"
sets="model alone; with the file set"
if [ "$cuda" = cuda ]; then
    gpu=$("$build/embed-cuda" "$model" samples/speech_16k.wav 2>&1); echo "$gpu"
    check "all three sets, CUDA built in" grep -q 'samples -> \[1, 1500, ' <<<"$gpu"
    sets="$sets; with CUDA on $(sed -n 's/.* on \([^;]*\);.*/\1/p' <<<"$gpu")"
fi
if [ $failed = 0 ]; then echo "test-embed: $n checks passed ($sets)"; else echo "test-embed: $failed of $((n + failed)) checks failed"; exit 1; fi
