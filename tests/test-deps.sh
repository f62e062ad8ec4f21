#!/usr/bin/env bash
# make deps while another apt-get holds its lock: it waits and then installs, rather than
# failing at once (issue 23). apt-get and sudo are stand-ins on a PATH of their own, which
# lacks cmake so that deps has something to install; nothing is installed for real.
set -euo pipefail
T=$(mktemp -d "${TMPDIR:-/tmp}/whisper-audio-deps.XXXXXX")
trap 'rm -rf "$T"' EXIT
fail() { echo "test-deps: FAILED: $*"; exit 1; }
mkdir "$T/bin"
for tool in sh bash make python3 pkg-config ls cat sed seq sleep grep id env; do
    p=$(command -v "$tool" 2>/dev/null) && ln -s "$p" "$T/bin/$tool"
done
# apt-get: the lock is held for its first two calls, then it records what it was asked
cat > "$T/bin/apt-get" <<'SH'
#!/bin/sh
n=$(cat "$STATE/calls" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/calls"
if [ "$n" -lt 2 ]; then
    echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
    exit 100
fi
echo "$*" >> "$STATE/log"
SH
printf '#!/bin/sh\nexec "$@"\n' > "$T/bin/sudo"
chmod +x "$T/bin/apt-get" "$T/bin/sudo"
out=$(STATE="$T" PATH="$T/bin" make -s deps OGG=0 FLAC=0 MP3=0 OPUS=0 2>&1) || fail "make deps failed: $out"
grep -q "waiting (up to 900 s) for another apt-get or dpkg" <<<"$out" || fail "no waiting message: $out"
grep -q "DPkg::Lock::Timeout=900 update -qq" "$T/log" || fail "apt-get update did not run after the lock: $(cat "$T/log")"
grep -q "install -y -qq.* cmake" "$T/log" || fail "cmake was not installed: $(cat "$T/log")"
# another failure is not waited on
printf '#!/bin/sh\necho "E: Unable to locate package cmake" >&2\nexit 100\n' > "$T/bin/apt-get"
if out=$(PATH="$T/bin" make -s deps OGG=0 FLAC=0 MP3=0 OPUS=0 2>&1); then fail "make deps passed a failed apt-get: $out"; fi
grep -q "Unable to locate package" <<<"$out" || fail "the failure's message is lost: $out"
echo "test-deps: ok: make deps waits for apt's lock, then installs; other apt-get failures fail at once"
