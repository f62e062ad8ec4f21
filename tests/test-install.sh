#!/usr/bin/env bash
# The library as C and C++ users take it: `make install` into a scratch DESTDIR, then
# consumers built against it with pkg-config (shared and static) and CMake's find_package,
# and one that adds this tree with add_subdirectory next to its own `main` target (then
# installs it with cmake --install and builds against that too); main and bench built by CMake
# against the shared library (BUILD_SHARED_LIBS=ON); make's objects rebuilt when the flags change.
# The CMake checks skip without cmake. Run from the repository
# root by `make test` (after the build); prints one line per check and a closing summary.
set -euo pipefail
# (grep -q reads here-strings, not pipes: it stops reading at its match, and pipefail would then
# fail the pipe on the writer's SIGPIPE, some runs and not others)
BUILD=${BUILD:-build}
MODEL=build/micro-80-f32.gguf
AUDIO=samples/speech_16k.wav
ROOT=$(pwd)
T=$(mktemp -d "${TMPDIR:-/tmp}/whisper-audio-install.XXXXXX")
trap 'rm -rf "$T"' EXIT
passed=0
ok() { echo "test-install: ok: $*"; passed=$((passed + 1)); }
fail() { echo "test-install: FAILED: $*"; exit 1; }
quiet() { "$@" >"$T/log" 2>&1 || { cat "$T/log"; return 1; }; }   # a command's output only when it fails

version=$(sed -n 's/^#define WHISPER_AUDIO_VERSION "\(.*\)"/\1/p' whisper-audio.h)
[ -n "$version" ] || fail "no WHISPER_AUDIO_VERSION in whisper-audio.h"
major=${version%%.*}

# ---- make install ---------------------------------------------------------------------
make -s BUILD="$BUILD" install DESTDIR="$T/stage" PREFIX=/usr >/dev/null
P="$T/stage/usr"
for f in bin/whisper-audio include/whisper-audio.h lib/libwhisper-audio.a lib/libwhisper-audio.so \
         lib/libwhisper-audio.so.$major lib/libwhisper-audio.so.$version lib/pkgconfig/whisper-audio.pc \
         lib/cmake/whisper-audio/whisper-audio-config.cmake lib/cmake/whisper-audio/whisper-audio-config-version.cmake; do
    [ -e "$P/$f" ] || fail "make install did not install $f"
done
ok "make install DESTDIR=... PREFIX=/usr installs main, the header, both libraries, pkg-config and CMake files"

soname=$(readelf -d "$P/lib/libwhisper-audio.so.$version" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ "$soname" = "libwhisper-audio.so.$major" ] || fail "SONAME is '$soname', expected libwhisper-audio.so.$major"
exported=$(nm -D --defined-only "$P/lib/libwhisper-audio.so.$version" | awk '{print $3}')
grep -q '^whisper_audio_encode_pcm$' <<<"$exported" || fail "whisper_audio_encode_pcm is not exported"
leaked=$(echo "$exported" | grep -v '^whisper_audio_' | grep -v '^_init$\|^_fini$' || true)
[ -z "$leaked" ] || fail "the shared library exports more than the API: ${leaked:0:300}"
ok "SONAME libwhisper-audio.so.$major; only whisper_audio_* exported ($(echo "$exported" | grep -c '^whisper_audio_') functions)"

grep -q "$version" <<<"$("$P/bin/whisper-audio" --version)" || fail "whisper-audio --version does not say $version"
ok "the installed main says its version ($version)"

# ---- make: objects follow the build flags (build/flags) --------------------------------------
# built once, then nothing to do; a changed flag (an audio library off, as when one is installed
# or removed) rebuilds the object, and the same flags again leave it alone
B="$T/flags-build"
compiles() { make --no-print-directory BUILD="$B" CUDA=0 "$@" "$B/vt.o" 2>&1 | grep -c -- '-c vt.cpp' || true; }
[ "$(compiles)" = 1 ] || fail "make did not build $B/vt.o"
[ "$(compiles)" = 0 ] || fail "make rebuilt $B/vt.o with the same flags"
[ "$(compiles OGG=0)" = 1 ] || fail "make did not rebuild $B/vt.o when the flags changed (OGG=0)"
[ "$(compiles OGG=0)" = 0 ] || fail "make rebuilt $B/vt.o with the same flags (OGG=0)"
ok "make rebuilds objects when the flags change (the build/flags stamp), and only then"

# ---- pkg-config, shared and static ---------------------------------------------------------
command -v pkg-config >/dev/null || fail "pkg-config is not installed (make deps installs it)"
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
[ "$(pkg-config --modversion whisper-audio)" = "$version" ] || fail "pkg-config --modversion"
g++ -std=c++17 -O2 examples/embed/embed.cpp $(pkg-config --cflags --libs whisper-audio) -o "$T/embed-shared"
LD_LIBRARY_PATH="$P/lib" "$T/embed-shared" "$MODEL" "$AUDIO" > "$T/shared.txt" || fail "the pkg-config (shared) consumer failed"
grep -q "libwhisper-audio.so.$major" <<<"$(readelf -d "$T/embed-shared")" || fail "the consumer does not link the shared library"
ok "a consumer built with pkg-config --cflags --libs runs against the shared library"
g++ -std=c++17 -O2 examples/embed/embed.cpp $(pkg-config --cflags whisper-audio) "$P/lib/libwhisper-audio.a" \
    $(pkg-config --static --libs-only-other --libs-only-l whisper-audio | sed 's/-lwhisper-audio//') \
    $(pkg-config --static --libs-only-L whisper-audio | tr ' ' '\n' | grep -v "$P/lib" | tr '\n' ' ') -o "$T/embed-static"
"$T/embed-static" "$MODEL" "$AUDIO" > "$T/static.txt" || fail "the static consumer failed"
cmp -s "$T/shared.txt" "$T/static.txt" || fail "the static and shared consumers disagree"
ok "a consumer linked to libwhisper-audio.a with pkg-config --static gives the same output"

# ---- CMake (skipped where cmake is missing: make deps installs it) --------------------------
if ! command -v cmake >/dev/null; then
    echo "test-install: skipped: the CMake checks (cmake is not installed; make deps installs it)"
    echo "test-install: $passed checks passed"
    exit 0
fi

# ---- CMake: main and bench against the shared library (BUILD_SHARED_LIBS=ON) ------------
# main and bench include whisper-audio.h alone, so they link to the library's exports; main's
# output from it is the make build's, bit for bit
cmake -S "$ROOT" -B "$T/shared" -DBUILD_SHARED_LIBS=ON -DWHISPER_AUDIO_CUDA=OFF -DWHISPER_AUDIO_BUILD_TESTS=OFF >/dev/null
cmake --build "$T/shared" --target main bench -j"$(nproc)" >/dev/null || fail "main and bench do not build against the shared library"
grep -q "libwhisper-audio.so.$major" <<<"$(readelf -d "$T/shared/main")" || fail "CMake's main does not link the shared library"
quiet "$T/shared/main" -m "$MODEL" -f "$AUDIO" -o "$T/shared.npy" --device cpu || fail "main against the shared library"
quiet "$BUILD/main" -m "$MODEL" -f "$AUDIO" -o "$T/make.npy" --device cpu || fail "$BUILD/main"
cmp -s "$T/shared.npy" "$T/make.npy" || fail "main against the shared library disagrees with $BUILD/main"
# f16 rows: converted by whisper_audio_f16_to_f32 for main's statistics
quiet "$T/shared/main" -m "$MODEL" -f "$AUDIO" -o "$T/shared-f16.npy" --outtype f16 --device cpu || fail "main --outtype f16"
quiet "$BUILD/main" -m "$MODEL" -f "$AUDIO" -o "$T/make-f16.npy" --outtype f16 --device cpu || fail "$BUILD/main --outtype f16"
cmp -s "$T/shared-f16.npy" "$T/make-f16.npy" || fail "main --outtype f16 against the shared library disagrees"
grep -q "backend cpu, [a-z0-9]*, batch 1" <<<"$("$T/shared/bench" -m "$MODEL" -b 1 -n 1 --device cpu)" || fail "bench against the shared library"
ok "cmake -DBUILD_SHARED_LIBS=ON builds main and bench on the public API; main (f32, f16) agrees with $BUILD/main"

# ---- CMake: find_package on the make-install tree ------------------------------------
mkdir -p "$T/pkg"
cp examples/embed/embed.cpp "$T/pkg/"
cat > "$T/pkg/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(consumer CXX)
find_package(whisper-audio $major REQUIRED)
add_executable(embed embed.cpp)
target_link_libraries(embed PRIVATE whisper-audio::whisper-audio)
EOF
cmake -S "$T/pkg" -B "$T/pkg/build" -DCMAKE_PREFIX_PATH="$P" >/dev/null
cmake --build "$T/pkg/build" >/dev/null
LD_LIBRARY_PATH="$P/lib" "$T/pkg/build/embed" "$MODEL" "$AUDIO" | cmp -s - "$T/shared.txt" || fail "the find_package consumer"
ok "find_package(whisper-audio $major) on the make-install tree gives whisper-audio::whisper-audio"

# ---- CMake: add_subdirectory beside the consumer's own main, then cmake --install ------
mkdir -p "$T/sub"
cp examples/embed/embed.cpp "$T/sub/main.cpp"
cat > "$T/sub/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(consumer CXX)
add_subdirectory("$ROOT" whisper-audio)
add_executable(main main.cpp)          # the consumer's own main: no clash with ours
target_link_libraries(main PRIVATE whisper-audio::whisper-audio)
EOF
cmake -S "$T/sub" -B "$T/sub/build" -DWHISPER_AUDIO_CUDA=OFF >/dev/null
cmake --build "$T/sub/build" -j"$(nproc)" >/dev/null
"$T/sub/build/main" "$MODEL" "$AUDIO" | cmp -s - "$T/shared.txt" || fail "the add_subdirectory consumer"
ok "add_subdirectory next to a consumer's own main target builds and runs (CUDA off)"
cmake --install "$T/sub/build" --prefix "$T/cmake-prefix" >/dev/null
cmake -S "$T/pkg" -B "$T/pkg/build2" -DCMAKE_PREFIX_PATH="$T/cmake-prefix" >/dev/null
cmake --build "$T/pkg/build2" >/dev/null
"$T/pkg/build2/embed" "$MODEL" "$AUDIO" | cmp -s - "$T/shared.txt" || fail "find_package on cmake --install's tree"
ok "find_package(whisper-audio) on cmake --install's tree"

echo "test-install: $passed checks passed"
