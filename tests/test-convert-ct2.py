#!/usr/bin/env python3
# test-convert-ct2.py - the converter on whisper.cpp ggml files and CTranslate2 directories (build/ggml,
# build/ct2: the real tools' files of the micro checkpoints, written again byte for byte by
# tests/data/make-model-files.py, which `make` runs first). The converter hands them to the library
# (main --save-gguf, found through WA_MAIN here): its GGUF must be byte for byte main's own, and give
# main the same embeddings, bit for bit, as main loading the source itself; --outtype is refused for
# them; a broken model.bin gives a one-line error and exit code 1, as does a main that is missing.
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
MAIN = os.path.abspath(os.environ.get("WA_MAIN", os.path.join(ROOT, "build", "main")))


def embed(model, out):
    subprocess.run([MAIN, "-m", model, "-f", AUDIO, "-o", out, "--device", "cpu", "--no-progress"],
                   check=True, capture_output=True)
    with open(out, "rb") as f:
        return f.read()


def convert(src, out, *extra, env=None):
    return subprocess.run([sys.executable, CONVERT, src, "-o", out, *extra], capture_output=True, text=True,
                          env=dict(os.environ, WA_MAIN=MAIN) if env is None else env)


def read(path):
    with open(path, "rb") as f:
        return f.read()


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
        ggml = os.path.join(ROOT, "build", "ggml")
        if not os.path.isfile(os.path.join(ct2, "micro-80-int8", "model.bin")):
            print("FAIL %s is missing: `make build/model-files.stamp` writes it (tests/data/make-model-files.py)" % ct2)
            return 1
        sources = [os.path.join(ct2, n) for n in sorted(os.listdir(ct2)) if os.path.isdir(os.path.join(ct2, n))]
        sources += [os.path.join(ggml, n) for n in sorted(os.listdir(ggml)) if n.endswith(".bin")]
        for src in sources:
            name = os.path.basename(src)
            want = embed(src, os.path.join(tmp, "src.npy"))
            out = os.path.join(tmp, name + ".gguf")
            r = convert(src, out)
            ok = r.returncode == 0 and embed(out, os.path.join(tmp, "gguf.npy")) == want
            check(ok, "%s: converted = loaded directly, bit for bit%s" % (name, "" if ok else ": " + r.stderr.strip()))
            lib = os.path.join(tmp, name + ".main.gguf")
            subprocess.run([MAIN, "-m", src, "--save-gguf", lib], check=True, capture_output=True)
            check(r.returncode == 0 and read(out) == read(lib), "%s: the converter's file is main --save-gguf's" % name)

        # --outtype does not apply to them; a main that is not there is named, with what to build
        r = convert(os.path.join(ct2, "micro-80-int8"), os.path.join(tmp, "x.gguf"), "--outtype", "f16")
        check(r.returncode == 1 and r.stderr.count("\n") == 1 and "--outtype f16" in r.stderr, "--outtype: %s" % r.stderr.strip())
        env = dict(os.environ, WA_MAIN=os.path.join(tmp, "no-main"))
        r = convert(os.path.join(ggml, "micro-80-q8_0.bin"), os.path.join(tmp, "x.gguf"), env=env)
        check(r.returncode == 1 and r.stderr.count("\n") == 1 and "WA_MAIN" in r.stderr and "make" in r.stderr,
              "no main: %s" % r.stderr.strip())
        r = convert(os.path.join(ggml, "micro-80-q8_0.bin"), os.path.join(tmp, "x.gguf"), "--main", MAIN, env={
            k: v for k, v in os.environ.items() if k != "WA_MAIN"})
        check(r.returncode == 0 and read(os.path.join(tmp, "x.gguf")) == read(os.path.join(tmp, "micro-80-q8_0.bin.main.gguf")),
              "--main PATH")
        check(not any(f.startswith("x.gguf.") for f in os.listdir(tmp)), "no temporary left")

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
        data = read(os.path.join(ggml, "micro-80-q8_0.bin"))
        for n in (30, len(data) // 2):
            with open(os.path.join(tmp, "cut.bin"), "wb") as f:
                f.write(data[:n])
            r = convert(os.path.join(tmp, "cut.bin"), os.path.join(tmp, "cut.gguf"))
            check(r.returncode == 1 and r.stderr.count("\n") == 1 and "truncated" in r.stderr,
                  "ggml file cut at %d bytes: %s" % (n, r.stderr.strip()))
        check(not os.path.exists(os.path.join(tmp, "cut.gguf")), "no output for a broken input")
    finally:
        shutil.rmtree(tmp)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
