#!/usr/bin/env python3
# test-convert-ct2.py - the converter on CTranslate2 directories (build/ct2: CTranslate2's own files
# of the micro checkpoints, written again byte for byte by tests/data/make-model-files.py, which
# `make` runs first): its GGUF must give main the same embeddings, bit for bit, as main loading the
# directory itself, with and without numpy; a broken model.bin must give a one-line error and exit
# code 1.
#
#   WA_MAIN=build/main python3 tests/test-convert-ct2.py
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERT = os.path.join(ROOT, "convert", "convert-hf-to-gguf.py")
AUDIO = os.path.join(ROOT, "tests", "data", "audio", "speech_16k.wav")
MAIN = os.environ.get("WA_MAIN", os.path.join(ROOT, "build", "main"))


def embed(model, out):
    subprocess.run([MAIN, "-m", model, "-f", AUDIO, "-o", out, "--device", "cpu", "--no-progress"],
                   check=True, capture_output=True)
    with open(out, "rb") as f:
        return f.read()


def convert(d, out, numpy=True, outtype="f32"):
    env = dict(os.environ, WHISPER_AUDIO_NO_NUMPY="0" if numpy else "1")
    return subprocess.run([sys.executable, CONVERT, d, "-o", out, "--outtype", outtype], env=env,
                          capture_output=True, text=True)


def main():
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        passed += ok
        failed += not ok
        print("%s %s" % ("ok  " if ok else "FAIL", what))

    tmp = tempfile.mkdtemp(prefix="wa-ct2-")
    try:
        ct2 = os.path.join(ROOT, "build", "ct2")
        if not os.path.isfile(os.path.join(ct2, "micro-80-int8", "model.bin")):
            print("FAIL %s is missing: `make build/model-files.stamp` writes it (tests/data/make-model-files.py)" % ct2)
            return 1
        for name in sorted(os.listdir(ct2)):
            d = os.path.join(ct2, name)
            if not os.path.isdir(d):
                continue
            want = embed(d, os.path.join(tmp, "dir.npy"))
            for numpy in ([True, False] if name == "micro-80-int8" else [True]):
                out = os.path.join(tmp, name + ".gguf")
                r = convert(d, out, numpy)
                check(r.returncode == 0 and embed(out, os.path.join(tmp, "gguf.npy")) == want,
                      "%s: converted (%s) = loaded directly" % (name, "numpy" if numpy else "pure Python"))

        # a cut model.bin: one line on stderr, exit code 1
        bad = os.path.join(tmp, "cut")
        os.mkdir(bad)
        with open(os.path.join(ct2, "micro-80-int8", "model.bin"), "rb") as f:
            data = f.read()
        for n in (100, 5000, len(data) // 2, len(data) - 1):
            with open(os.path.join(bad, "model.bin"), "wb") as f:
                f.write(data[:n])
            r = convert(bad, os.path.join(tmp, "cut.gguf"))
            check(r.returncode == 1 and r.stderr.count("\n") == 1 and "error:" in r.stderr,
                  "model.bin cut at %d bytes: %s" % (n, r.stderr.strip()))
    finally:
        shutil.rmtree(tmp)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
