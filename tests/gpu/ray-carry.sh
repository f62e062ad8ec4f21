#!/usr/bin/env bash
# tests/gpu/ray-carry.sh - Ray for a GPU machine that reaches no package registry, for
# tests/gpu/ray-bench.py.
#
#   tests/gpu/ray-carry.sh download [PART_MIB]    here, where pip reaches PyPI
#   tests/gpu/ray-carry.sh install                 there, after every part has been carried
#
# download: `pip download`s exactly the wheels the device's Python lacks for Ray Data (Python
# 3.12, x86-64 manylinux; its image already holds numpy, pandas, pyarrow, fsspec, click,
# filelock, msgpack, packaging, protobuf, pyyaml, requests and attrs: KINDS.md's list): ray and
# jsonschema with the three packages jsonschema needs, pinned. One call carries at most 64 MiB
# with the working tree (about 37.5 MiB), so the wheels go into one tar, cut into parts of
# PART_MIB (default 20) MiB: build/carry/ray-a, ray-b, ... one folder a call, each carried by
# its own call (`carry: ["build/carry/ray-a"]`, then ray-b, ...), back to back (the machine keeps
# ignored files while warm: 30 s after each call). Prints the sizes and the calls.
# install: joins the parts, checks the tar's sha256 (SHA256SUMS in every part), installs the
# wheels into /tmp/site (pip --no-index --no-deps) and prints the line to put first in a command:
#   export PYTHONPATH=/tmp/site:$PYTHONPATH
set -euo pipefail
cd "$(dirname "$0")/../.."
CARRY=build/carry
WHEELS=(ray==2.60.0 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1)
PY_VERSION=3.12
PYTHON=${PYTHON:-python3}     # install: the device's python3 (3.12); another for a try elsewhere
SITE=${SITE:-/tmp/site}       # install: where the wheels go

case "${1:-}" in
download)
    part_mib=${2:-20}
    tmp=$CARRY/ray-wheels
    rm -rf "$tmp" "$CARRY"/ray-[a-z] && mkdir -p "$tmp"
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version "$PY_VERSION" --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform manylinux1_x86_64 -d "$tmp" "${WHEELS[@]}"
    [ "$(ls "$tmp"/*.whl | wc -l)" = "${#WHEELS[@]}" ] || { echo "ray-carry: expected ${#WHEELS[@]} wheels in $tmp"; exit 1; }
    mib() { awk -v b="$1" 'BEGIN { printf "%d bytes (%.2f MiB)", b, b / 1048576 }'; }
    echo "ray-carry: the wheels:"
    for w in "$tmp"/*.whl; do echo "  $(mib "$(stat -c %s "$w")")  $(basename "$w")"; done
    (cd "$tmp" && tar -cf ../ray-wheels.tar ./*.whl)
    tar=$CARRY/ray-wheels.tar
    sum=$(sha256sum "$tar" | cut -d' ' -f1)
    echo "ray-carry: their tar: $(mib "$(stat -c %s "$tar")"), sha256 $sum"
    split -b "${part_mib}M" -d -a 2 "$tar" "$CARRY/ray-part-"
    letters=(a b c d e f g h)
    i=0
    for part in "$CARRY"/ray-part-*; do
        dir=$CARRY/ray-${letters[$i]}
        mkdir -p "$dir" && mv "$part" "$dir/" && echo "$sum  ray-wheels.tar" > "$dir/SHA256SUMS"
        echo "  $dir: $(mib "$(stat -c %s "$dir"/ray-part-*)")"
        i=$((i + 1))
    done
    rm -rf "$tmp" "$tar"
    echo "ray-carry: the working tree that travels with each call: $(mib "$(git ls-files -z | xargs -0 du -cb | tail -n 1 | cut -f1)") (tracked files; a call carries at most 64 MiB with it)"
    echo "ray-carry: $i calls back to back, each carrying one of those folders; the last runs 'tests/gpu/ray-carry.sh install'"
    ;;
install)
    parts=$(ls "$CARRY"/ray-[a-z]/ray-part-* 2>/dev/null) || true
    [ -n "$parts" ] || { echo "ray-carry: no parts under $CARRY/ray-*/ (carry them first)"; exit 1; }
    sums=$(cat "$CARRY"/ray-[a-z]/SHA256SUMS | sort -u)
    [ "$(echo "$sums" | wc -l)" = 1 ] || { echo "ray-carry: the parts come from different downloads"; exit 1; }
    # the parts in the order split made them (ray-part-00, 01, ...), whichever folder holds each
    n=$(echo "$parts" | wc -l)
    last=$(for p in $parts; do basename "$p"; done | sort | tail -n 1)
    [ "$last" = "$(printf 'ray-part-%02d' $((n - 1)))" ] || { echo "ray-carry: $n parts but the last is $last: one is missing"; exit 1; }
    cat $(for p in $parts; do echo "$(basename "$p") $p"; done | sort | cut -d' ' -f2) > /tmp/ray-wheels.tar
    (cd /tmp && echo "$sums" | sha256sum -c --quiet) || { echo "ray-carry: sha256 mismatch: a part is missing or lost"; exit 1; }
    rm -rf /tmp/ray-wheels && mkdir -p /tmp/ray-wheels && tar -xf /tmp/ray-wheels.tar -C /tmp/ray-wheels
    "$PYTHON" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" /tmp/ray-wheels/*.whl
    echo "ray-carry: installed into $SITE: export PYTHONPATH=$SITE:\$PYTHONPATH"
    ;;
*)
    sed -n '2,19p' "$0"
    exit 2
    ;;
esac
