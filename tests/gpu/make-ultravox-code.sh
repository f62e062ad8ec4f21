#!/usr/bin/env bash
# tests/gpu/make-ultravox-code.sh - makes tests/gpu/.ultravox (ignored by git, never committed):
# fixie-ai/ultravox's model code (MIT), which tests/gpu/tower-bench.py runs as Ultravox's own
# tower and projector (it is not in transformers). Only their files, as they are; the adapters
# for transformers 5 live in tower-bench.py.
#
#   tests/gpu/make-ultravox-code.sh SRC [COMMIT]
#
# SRC: a clone or checkout of https://github.com/fixie-ai/ultravox (a work tree, or a bare git
# directory such as the fetch tool's /work/.mirror/fixie-ai+ultravox/repo); COMMIT (git sources
# only; default 648efe7, the one tests/data/towers was made with, else HEAD). On the GPU machine
# (no network) carry the folder: the device tool's carry ["tests/gpu/.ultravox"].
set -eu
SRC=${1:?usage: $0 ULTRAVOX_CLONE_OR_GIT_DIR [COMMIT]}
COMMIT=${2:-648efe7}
DST=$(cd "$(dirname "$0")" && pwd)/.ultravox
FILES="ultravox/model/ultravox_config.py ultravox/model/ultravox_model.py LICENSE"
rm -rf "$DST.tmp" && mkdir -p "$DST.tmp/ultravox/model"
if git --git-dir="$SRC" rev-parse --verify -q "$COMMIT^{commit}" >/dev/null 2>&1 ||
   git -C "$SRC" rev-parse --verify -q "$COMMIT^{commit}" >/dev/null 2>&1; then
    G="git --git-dir=$SRC"; $G rev-parse -q --verify HEAD >/dev/null 2>&1 || G="git -C $SRC"
    for f in $FILES; do $G show "$COMMIT:$f" > "$DST.tmp/$f"; done
    echo "fixie-ai/ultravox $($G rev-parse "$COMMIT")" > "$DST.tmp/SOURCE"
elif [ -f "$SRC/ultravox/model/ultravox_model.py" ]; then
    for f in $FILES; do cp "$SRC/$f" "$DST.tmp/$f"; done
    echo "fixie-ai/ultravox (copied from $SRC)" > "$DST.tmp/SOURCE"
else
    echo "$0: $SRC is neither a git source with commit $COMMIT nor a checkout with ultravox/model/" >&2
    exit 1
fi
rm -rf "$DST" && mv "$DST.tmp" "$DST"
echo "wrote $DST ($(cat "$DST/SOURCE"))"
