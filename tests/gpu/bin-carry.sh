#!/usr/bin/env bash
# tests/gpu/bin-carry.sh - the programs built HERE, with CUDA, carried to the GPU machine, so that a
# device call spends its time testing rather than compiling (vt-cuda.cu alone is minutes), and a
# second tree can travel beside this one for before/after comparisons.
#
#   tests/gpu/bin-carry.sh make [BEFORE_TREE]   here: build/carry/bin.tar.xz (ignored by git) from
#                                               this tree's main, bench, whisper-audio-server,
#                                               test-all, libwhisper-audio.so and dev/cuda's
#                                               build/dev/attention with their flags
#                                               (built first in build-carry/: CUDA=1, the
#                                               libstdc++ linked in), BEFORE_TREE's main, bench and
#                                               whisper-audio-server when given (built the same way
#                                               there first), and Debian's
#                                               cpp-httplib with the brotli libraries it needs
#   tests/gpu/bin-carry.sh install              there: unpacks it into place (this tree's programs
#                                               at their paths, the other tree's under build/before/,
#                                               the libraries under build/carry/lib: put it on
#                                               LD_LIBRARY_PATH; run-all.sh does)
#
# Why it works: the GPU machine's glibc is older than this machine's (Debian 12: 2.36); linked with
# -static-libstdc++ and --gc-sections the programs ask for GLIBC_2.34 at most (checked below), and
# CUDA comes from the static runtime, cuBLASLt from the machine's toolkit at run time. The decoders
# travel apart (tests/gpu/make-audio-carry.sh). Stripped and xz-compressed: about 8 MiB, where the
# device tool carries 64 MiB with the tracked tree's 40.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CARRY=$ROOT/build/carry/bin.tar.xz
LINK="-static-libstdc++ -Wl,--gc-sections"

build_tree() {   # $1: a tree's root; $2: its build folder; $3: the link flags; $4...: its targets
    local t=$1 b=$2 l=$3; shift 3
    (cd "$t" && LDLIBS="$l" make -j"$(nproc)" CUDA=1 BUILD="$b" "$@" >/dev/null) || { echo "bin-carry: the build in $t failed" >&2; exit 1; }
}

case "${1:-}" in
make)
    before=${2:-}
    build_tree "$ROOT" build-carry "$LINK" main bench build-carry/test-all build-carry/libwhisper-audio.so \
        build-carry/dev/attention
    # the server links libstdc++ as cpp-httplib does, from the machine (the static one's
    # std::random_device would ask for glibc 2.36's arc4random)
    build_tree "$ROOT" build-carry-server -Wl,--gc-sections server
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/build/before" "$tmp/build/carry/lib" "$tmp/build/dev"
    cp "$ROOT/build-carry/main" "$ROOT/build-carry/bench" "$tmp/"
    [ ! -x "$ROOT/build-carry-server/whisper-audio-server" ] || cp "$ROOT/build-carry-server/whisper-audio-server" "$tmp/"
    cp "$ROOT/build-carry/test-all" "$ROOT/build-carry/libwhisper-audio.so" "$ROOT/build-carry/flags" "$tmp/build/"
    cp "$ROOT/build-carry/dev/attention" "$tmp/build/dev/"
    if [ -n "$before" ]; then
        build_tree "$before" build-carry "$LINK" main bench
        cp "$before/build-carry/main" "$before/build-carry/bench" "$tmp/build/before/"
        build_tree "$before" build-carry-server -Wl,--gc-sections server
        [ ! -x "$before/build-carry-server/whisper-audio-server" ] || cp "$before/build-carry-server/whisper-audio-server" "$tmp/build/before/"
        git -C "$before" rev-parse HEAD >"$tmp/build/before/COMMIT"
    fi
    # the server's cpp-httplib (Debian 12's 0.11) and the brotli it links; libssl and zlib are the machine's own
    for l in libcpp-httplib.so.0.11 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1; do
        p=$(ldconfig -p | awk -v l="$l" '$1 == l { print $NF }' | head -n 1)
        [ -n "$p" ] && cp -L "$p" "$tmp/build/carry/lib/"
    done
    find "$tmp" -type f -perm -u+x ! -name '*.so*' -exec strip {} +
    strip --strip-unneeded "$tmp/build/libwhisper-audio.so"
    for f in $(find "$tmp" -type f -perm -u+x ! -path '*/carry/lib/*'); do
        v=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)
        [ "$(printf '%s\n' "$v" GLIBC_2.34 | sort -V | tail -n 1)" = GLIBC_2.34 ] ||
            { echo "bin-carry: ${f#"$tmp"/} needs $v (the GPU machine has 2.39, but keep 2.34 for older ones)" >&2; exit 1; }
    done
    git -C "$ROOT" rev-parse HEAD >"$tmp/COMMIT.bin-carry"
    mkdir -p "$(dirname "$CARRY")"
    # xz -9's 64 MiB window spans the programs, whose CUDA code is mostly the same bytes: half the size of -6's
    XZ_OPT=-9 tar -C "$tmp" -cJf "$CARRY" .
    echo "wrote $CARRY ($(du -h "$CARRY" | cut -f1)): $(tar -tJf "$CARRY" | grep -v '/$' | xargs)"
    ;;
install)
    [ -f "$CARRY" ] || { echo "bin-carry: no $CARRY (tests/gpu/bin-carry.sh make, here)" >&2; exit 1; }
    tar -C "$ROOT" -xJf "$CARRY"
    echo "bin-carry: programs of $(cat "$ROOT/COMMIT.bin-carry")$([ -f "$ROOT/build/before/COMMIT" ] && echo ", before tree $(cat "$ROOT/build/before/COMMIT")")"
    ;;
*)
    sed -n '2,21p' "$0"; exit 2
    ;;
esac
