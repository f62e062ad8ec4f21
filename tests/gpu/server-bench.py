#!/usr/bin/env python3
"""whisper-audio-server's speed on one GPU (issue 24 item 6): requests/s, windows/s and p50/p99
latency for 1, 8 and 64 concurrent clients sending 10 s clips, against ./main -b 32 on the same
clips and against transformers serving the same requests one at a time.

Model: Whisper large-v3 with random weights (build/large-v3-random.gguf, made by
`convert/convert-hf-to-gguf.py --random large-v3` when missing; tests/gpu/e2e.py makes the same
file), run in bf16 at -b 32.

Clips (made here, in --work): --n-clips distinct 10 s WAVs, 16 kHz mono s16, cut from the speech
in tests/data/audio at their own offsets, gains and noise floors (every 4th amplitude-modulated
noise). Request i of a level sends clip i (mod --n-clips).

Ours, the server: `./whisper-audio-server -m MODEL --device cuda --dtype bf16 -b 32 --port 0` on
127.0.0.1. Each client is a Python thread with http.client, one connection a request: the WAV as
the raw body of POST /v1/audio/embeddings, `Accept: application/x-npy` (the .npy back is main's
file byte for byte and costs nothing to parse, where JSON float text or base64 would cost the
client more than the server). Latency: from the connect to the last byte of the answer. A level:
--requests requests from its clients (1, 8, 64), bounded by --level-s as well; requests/s and
windows/s over the level's wall time; the server's batch fill from /metrics. A warm-up of 8
requests first.

Checks, every answer: status 200, the .npy header equal to main's for that clip (shape, dtype),
the length equal, and its first 64 KiB of rows equal to main's (bitwise; where not bitwise, a
relative L2 under --tol and far nearer its own clip's rows than the next clip's: nothing mixed
up); every --check-every'th answer compared whole the same way.

main: `./main -m MODEL -b 32 --device cuda --dtype bf16 --list CLIPS -o DIR/ --json` on the same
clips, one window each: windows/s over its "run" timing (decode, mel, forward, writing each .npy;
load and init excluded). The forward alone (./bench, the graph replay at batch 1 and 32) when
./bench exists: the issue's latency target is one client's p50 at most the batch-1 forward + 3 ms.

transformers, the way a Python service without a batcher serves: each request's WAV bytes
decoded with wave + numpy, WhisperFeatureExtractor(device=cuda), WhisperEncoder (sdpa, bf16,
random weights of the same shape) on that one clip, the rows copied to the host as f32; one
request per call, one after another (no HTTP layer: that would only add to its time), after a
3-request warm-up; per-request latency and requests/s.

Run on the GPU machine from the repository root, after `make -j16 all` (the server is built
where libcpp-httplib-dev is installed; without it this script prints that it skipped):
    python3 tests/gpu/server-bench.py [--out DIR]
Here, on the CPU, with the micro model:
    VENV/bin/python tests/gpu/server-bench.py --device cpu --model build/micro-80-f32.gguf [--no-transformers]
Prints the table last; writes server-bench.json to --out (default $OUT, else build/gpu-logs);
exits 1 when an answer is missing, wrong or mixed up.
"""
import argparse
import http.client
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import wave

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SR, CLIP_S = 16000, 10
SLICE = 64 * 1024            # bytes of rows checked in every answer
T_START = time.monotonic()


def log(*a):
    print("server-bench:", *a, flush=True)


def left(args):
    return args.budget_s - (time.monotonic() - T_START)


# ---------------------------------------------------------------------------------------
# clips
# ---------------------------------------------------------------------------------------

def read_wav(path):
    with wave.open(path) as w:
        assert w.getframerate() == SR and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def write_wav(path, x):
    tmp = path + ".tmp"
    with wave.open(tmp, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SR)
        w.writeframes((np.clip(x, -1, 1) * 32767).astype("<i2").tobytes())
    os.replace(tmp, path)


def make_clips(work, n_clips):
    """n_clips distinct 10 s clips (paths relative to work); kept when already made so."""
    rel = [os.path.join("clips", "clip%03d.wav" % i) for i in range(n_clips)]
    stamp = os.path.join(work, "clips", "stamp.json")
    want = {"n_clips": n_clips, "clip_s": CLIP_S, "version": 1}
    if os.path.exists(stamp) and json.load(open(stamp)) == want:
        return rel
    os.makedirs(os.path.join(work, "clips"), exist_ok=True)
    d = os.path.join(ROOT, "tests", "data", "audio")
    names = ["long_70s_16k.wav", "speech_16k.wav"] + ["speech/" + n for n in sorted(os.listdir(os.path.join(d, "speech")))
                                                     if n.endswith(".wav")]
    pool = np.concatenate([read_wav(os.path.join(d, n)) for n in names])
    rng = np.random.default_rng(24)
    n = CLIP_S * SR
    for i, path in enumerate(rel):
        if i % 4 == 3:     # noise with a syllable-rate envelope
            noise = rng.standard_normal(n).astype(np.float32)
            env = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(2, 6) * np.arange(n) / SR + rng.uniform(0, 6.3))
            x = noise / (np.abs(noise).max() + 1e-9) * env * rng.uniform(0.1, 0.5)
        else:
            off = (i * 7919 * 160) % (len(pool) - n)
            x = pool[off:off + n] * rng.uniform(0.3, 1.0) + rng.standard_normal(n).astype(np.float32) * 10 ** rng.uniform(-4, -2)
        write_wav(os.path.join(work, path), x.astype(np.float32))
    json.dump(want, open(stamp, "w"))
    return rel


# ---------------------------------------------------------------------------------------
# .npy answers and the checks against main's files
# ---------------------------------------------------------------------------------------

def npy_shape(head):
    m = re.search(rb"'shape': \(([^)]*)\)", head)
    return [int(x) for x in m.group(1).replace(b" ", b"").split(b",") if x] if m else None


def npy_descr(head):
    m = re.search(rb"'descr': '([^']*)'", head)
    return m.group(1).decode() if m else "<f4"


def rel_l2(a, b, descr):
    x = np.frombuffer(a, dtype=descr).astype(np.float64)
    y = np.frombuffer(b, dtype=descr).astype(np.float64)
    if x.shape != y.shape:
        return float("inf")
    return float(np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30))


class Refs:
    """main's .npy of each clip: its 128-byte header, size, first SLICE bytes of rows; whole on demand."""

    def __init__(self, paths):
        self.paths = paths
        self.head, self.size, self.slice = [], [], []
        for p in paths:
            with open(p, "rb") as f:
                b = f.read(128 + SLICE)
            self.head.append(b[:128])
            self.slice.append(b[128:])
            self.size.append(os.path.getsize(p))

    def whole(self, i):
        with open(self.paths[i], "rb") as f:
            return f.read()[128:]

    def compare(self, clip, got, whole_ref, tol):
        """'exact', 'close' or 'FAIL ...' for the rows got (a slice, or whole when whole_ref)."""
        n = len(self.paths)
        want = self.whole(clip) if whole_ref else self.slice[clip]
        if got == want:
            return "exact", 0.0
        descr = npy_descr(self.head[clip])
        e = rel_l2(got, want, descr)
        other = (clip + 1) % n
        e_other = rel_l2(got, self.whole(other) if whole_ref else self.slice[other], descr) if n > 1 else float("inf")
        if e <= tol and e < 0.1 * e_other:
            return "close", e
        return "FAIL (rel L2 %.3g to its clip, %.3g to the next)" % (e, e_other), e


# ---------------------------------------------------------------------------------------
# main and bench
# ---------------------------------------------------------------------------------------

def dev_flags(args):
    f = ["--device", args.device]
    if args.device == "cuda":
        f += ["--dtype", args.dtype]
    if args.threads:
        f += ["-t", str(args.threads)]
    return f


def main_opts(args):
    return (["--pool", "mean"] if args.pool else []) + (["--outtype", args.outtype] if args.outtype != "f32" else [])


def run_main(args, work, clips):
    lst = os.path.join(work, "clips.list")
    with open(lst, "w") as f:
        f.write("\n".join(clips) + "\n")
    out = os.path.join(work, "main-out")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cmd = [args.main, "-m", args.model, "--list", lst, "-b", str(args.batch), "--no-progress", "--json", "-o", "main-out/"] + \
        dev_flags(args) + main_opts(args)
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=max(10, left(args)))
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))
    j = json.loads(r.stdout)
    files = j["files"]
    if [f["path"] for f in files] != clips:
        raise RuntimeError("main's files are not the clips: %s" % [f["path"] for f in files][:4])
    t = j["timings_ms"]
    return {"windows": j["windows"], "run_ms": t["run"], "load_ms": t["load"], "init_ms": t["init"], "wall_s": wall,
            "windows_per_s": 1000.0 * j["windows"] / t["run"], "shape": j["shape"]}, [os.path.join(work, f["output"]) for f in files]


def forward_ms(args, batch):
    """./bench's forward alone (compute: the graph replay on CUDA), ms per batch; None without ./bench."""
    if not os.path.exists(args.bench):
        return None
    r = subprocess.run([args.bench, "-m", args.model, "-b", str(batch), "-n", "10"] + dev_flags(args),
                       capture_output=True, text=True, timeout=max(10, min(60, left(args))))
    m = re.search(r"of which compute ([0-9.]+) ms", r.stdout)
    if r.returncode != 0 or not m:
        log("bench -b %d failed: %s" % (batch, (r.stdout + r.stderr)[-500:]))
        return None
    return float(m.group(1))


# ---------------------------------------------------------------------------------------
# the server and its clients
# ---------------------------------------------------------------------------------------

class Server:
    def __init__(self, args, work, max_clients):
        self.log_path = os.path.join(work, "server.log")
        self.log = open(self.log_path, "w")
        cmd = [args.server, "-m", args.model, "--port", "0", "-b", str(args.batch), "--http-threads", str(max(64, max_clients + 16)),
               "--max-queue", str(max(256, 2 * max_clients))] + dev_flags(args)
        if args.batch_wait_ms is not None:
            cmd += ["--batch-wait-ms", str(args.batch_wait_ms)]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        t_end = time.monotonic() + 120
        while time.monotonic() < t_end and self.port is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(self.log_path).read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                raise RuntimeError("the server exited: " + open(self.log_path).read()[-2000:])
            time.sleep(0.02)
        if self.port is None:
            raise RuntimeError("the server printed no port")
        while time.monotonic() < t_end:
            try:
                if get(self.port, "/health")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError("the server exited: " + open(self.log_path).read()[-2000:])
            time.sleep(0.05)
        else:
            raise RuntimeError("the server did not become ready")
        self.ready_s = time.monotonic() - (t_end - 120)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def get(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


DISP = 'whisper_audio_dispatcher_seconds_total{part="%s"}'


def metrics(port):
    st, body = get(port, "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def post(port, body, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        c.request("POST", path, body=body, headers={"Accept": "application/x-npy", "Content-Length": str(len(body))})
        r = c.getresponse()
        data = r.read()
        return r.status, r.getheader("X-Processing-Ms"), data
    finally:
        c.close()


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if xs else float("nan")


def run_clients(port, path, audio, n_clients, check_every, take):
    """n_clients threads, each posting the request take() gives it until it gives None."""
    lock = threading.Lock()
    recs = []

    def client():
        while True:
            i = take()
            if i is None:
                return
            clip = i % len(audio)
            t0 = time.perf_counter()
            try:
                st, srv_ms, body = post(port, audio[clip], path)
            except Exception as e:      # counted as a failed request
                st, srv_ms, body = -1, None, repr(e).encode()
            dt = time.perf_counter() - t0
            rec = {"i": i, "clip": clip, "status": st, "s": dt, "server_ms": float(srv_ms) if srv_ms else None, "n": len(body),
                   "head": body[:128], "slice": body[128:128 + SLICE], "whole": body[128:] if i % check_every == 0 else None}
            with lock:
                recs.append(rec)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return recs


def run_level(port, path, audio, n_clients, n_req, cap_s, check_every, procs=1):
    """n_clients concurrent clients; with procs > 1 spread over that many processes (forked), so
    that the clients' own Python (one GIL reading megabytes of answers) is not what is measured."""
    t_stop = time.monotonic() + cap_s
    procs = max(1, min(procs, n_clients))
    t0 = time.perf_counter()
    if procs == 1:
        lock, nxt = threading.Lock(), [0]

        def take():
            with lock:
                if nxt[0] >= n_req or time.monotonic() > t_stop:
                    return None
                nxt[0] += 1
                return nxt[0] - 1
        recs = run_clients(port, path, audio, n_clients, check_every, take)
        return recs, time.perf_counter() - t0, nxt[0] < n_req
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    counter, results = ctx.Value("l", 0), ctx.Queue()

    def take():
        with counter.get_lock():
            if counter.value >= n_req or time.monotonic() > t_stop:
                return None
            counter.value += 1
            return counter.value - 1

    def worker(k):
        share = n_clients // procs + (k < n_clients % procs)
        results.put(run_clients(port, path, audio, share, check_every, take))

    ps = [ctx.Process(target=worker, args=(k,), daemon=True) for k in range(procs)]
    for p in ps:
        p.start()
    recs = []
    for _ in ps:                       # drained before the joins: a full pipe would block a child
        recs += results.get()
    for p in ps:
        p.join()
    return recs, time.perf_counter() - t0, counter.value < n_req


def check_level(recs, refs, tol):
    """Counts of the answers' checks; the first few failures as text."""
    c = {"ok_status": 0, "shape_ok": 0, "exact": 0, "close": 0, "whole_checked": 0, "whole_exact": 0, "whole_close": 0,
         "max_rel_l2": 0.0, "failures": []}
    for r in recs:
        bad = None
        if r["status"] != 200:
            bad = "status %d: %s" % (r["status"], r["head"][:200])
        else:
            c["ok_status"] += 1
            if r["head"] != refs.head[r["clip"]] or r["n"] != refs.size[r["clip"]]:
                bad = "header or size differ from main's: %s, %d bytes (main: %s, %d)" % (
                    npy_shape(r["head"]), r["n"], npy_shape(refs.head[r["clip"]]), refs.size[r["clip"]])
            else:
                c["shape_ok"] += 1
                for what, got, whole in (("first rows", r["slice"], False), ("whole", r["whole"], True)):
                    if got is None:
                        continue
                    verdict, e = refs.compare(r["clip"], got, whole, tol)
                    c["max_rel_l2"] = max(c["max_rel_l2"], e)
                    if whole:
                        c["whole_checked"] += 1
                    if verdict.startswith("FAIL"):
                        bad = "%s: %s" % (what, verdict)
                        break
                    c[("whole_" if whole else "") + verdict] += 1
        if bad:
            c["failures"].append("request %d (clip %d): %s" % (r["i"], r["clip"], bad))
    c["n_failed"] = len(c["failures"])
    c["failures"] = c["failures"][:5]
    return c


# ---------------------------------------------------------------------------------------
# transformers, one request per call
# ---------------------------------------------------------------------------------------

def transformers_peer(args, meta, audio, shape, n_req, cap_s):
    import torch
    import transformers
    from transformers import WhisperConfig, WhisperFeatureExtractor
    from transformers.models.whisper.modeling_whisper import WhisperEncoder
    dev = args.device
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype if dev == "cuda" else "f32"]
    if dev == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
    cfg = WhisperConfig(d_model=meta["n_state"], encoder_layers=meta["n_layer"], encoder_attention_heads=meta["n_head"],
                        encoder_ffn_dim=meta["n_ff"], decoder_layers=1, decoder_attention_heads=meta["n_head"],
                        decoder_ffn_dim=meta["n_ff"], num_mel_bins=meta["n_mels"], max_source_positions=meta["n_ctx"],
                        vocab_size=51866, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(dev):
        enc = WhisperEncoder(cfg).to(dt).eval()
    fe = WhisperFeatureExtractor(feature_size=meta["n_mels"])

    def serve(body):
        with wave.open(io.BytesIO(body)) as w:
            x = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
        with torch.inference_mode():
            feats = fe([x], sampling_rate=SR, return_tensors="pt", device=dev).input_features
            h = enc(feats.to(dev, dt)).last_hidden_state
            if args.pool:
                h = h.mean(dim=1)
            return h.to(torch.float16 if args.outtype == "f16" else torch.float32).cpu().numpy()

    for i in range(3):
        serve(audio[i % len(audio)])
    lat, bad = [], 0
    t_stop = time.monotonic() + cap_s
    t0 = time.perf_counter()
    for i in range(n_req):
        if time.monotonic() > t_stop:
            break
        t = time.perf_counter()
        y = serve(audio[i % len(audio)])
        lat.append(time.perf_counter() - t)
        bad += list(y.shape) != shape
    wall = time.perf_counter() - t0
    del enc
    if dev == "cuda":
        torch.cuda.empty_cache()
    return {"torch": torch.__version__, "transformers": transformers.__version__, "dtype": str(dt).replace("torch.", ""),
            "requests": len(lat), "wall_s": wall, "req_per_s": len(lat) / wall, "windows_per_s": len(lat) * shape[0] / wall,
            "p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000, "shape_bad": bad}


# ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="default build/large-v3-random.gguf (made when missing)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dtype", default="bf16", help="on cuda (bf16, f16, fp8)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=0, help="-t for the server, main and bench (default: theirs)")
    ap.add_argument("--clients", default="1,8,64")
    ap.add_argument("--requests", default="64,128,256", help="requests per level, one per --clients entry")
    ap.add_argument("--n-clips", type=int, default=256, help="distinct clips (main encodes them all)")
    ap.add_argument("--level-s", type=float, default=30.0, help="each level stops taking requests after this")
    ap.add_argument("--check-every", type=int, default=16, help="every Nth answer compared whole with main's")
    ap.add_argument("--tol", type=float, default=None, help="relative L2 allowed where not bitwise (default 1e-2 bf16/f16 "
                    "on cuda, 1e-5 f32 on cuda, 0 on the CPU)")
    ap.add_argument("--pool", action="store_true", help="pool=mean (main --pool mean) instead of the rows")
    ap.add_argument("--outtype", default="f32", choices=["f32", "f16"])
    ap.add_argument("--batch-wait-ms", type=int, default=None, help="the server's --batch-wait-ms (default: its own)")
    ap.add_argument("--client-procs", type=int, default=min(8, os.cpu_count() or 1),
                    help="processes the clients are spread over (1: threads of this one)")
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument("--tf-requests", type=int, default=64)
    ap.add_argument("--no-bench", action="store_true", help="skip ./bench's forward alone")
    ap.add_argument("--budget-s", type=float, default=140.0, help="the whole run, at most (phases are cut to fit)")
    ap.add_argument("--server", default=os.path.join(ROOT, "whisper-audio-server"))
    ap.add_argument("--main", default=os.path.join(ROOT, "main"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "bench"))
    ap.add_argument("--work", default=os.path.join(ROOT, "build", "server-bench"))
    ap.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "build", "gpu-logs"))
    args = ap.parse_args()

    if not os.path.exists(args.server):
        print("server-bench: skipped: no whisper-audio-server (libcpp-httplib-dev missing at build)")
        return 0
    clients = [int(x) for x in args.clients.split(",")]
    n_reqs = [int(x) for x in args.requests.split(",")]
    if len(n_reqs) != len(clients):
        ap.error("--requests needs one count per --clients entry")
    tol = args.tol if args.tol is not None else (0.0 if args.device == "cpu" else 1e-5 if args.dtype == "f32" else 1e-2)
    args.work = os.path.abspath(args.work)
    os.makedirs(args.work, exist_ok=True)
    if args.model is None:
        args.model = os.path.join(ROOT, "build", "large-v3-random.gguf")
        if not os.path.exists(args.model):
            log("making %s (--random large-v3)" % args.model)
            subprocess.run([sys.executable, os.path.join(ROOT, "convert", "convert-hf-to-gguf.py"), "--random", "large-v3",
                            "-o", args.model], check=True, capture_output=True)
    args.model = os.path.abspath(args.model)
    for p in (args.main, args.model):
        if not os.path.exists(p):
            log("FAILED: %s is missing" % p)
            return 1

    clips = make_clips(args.work, args.n_clips)
    audio = [open(os.path.join(args.work, c), "rb").read() for c in clips]
    log("%d clips of %d s, model %s, %s%s, -b %d; %.1f s so far" % (
        len(clips), CLIP_S, os.path.basename(args.model), args.device, " " + args.dtype if args.device == "cuda" else "",
        args.batch, time.monotonic() - T_START))

    main_r, main_files = run_main(args, args.work, clips)
    refs = Refs(main_files)
    shape = npy_shape(refs.head[0])          # one clip's: [windows, 1500, d], pooled [windows, d]
    log("main -b %d: %d windows, run %.0f ms: %.1f windows/s (load %.0f + init %.0f ms, wall %.2f s), each file %s" % (
        args.batch, main_r["windows"], main_r["run_ms"], main_r["windows_per_s"], main_r["load_ms"], main_r["init_ms"],
        main_r["wall_s"], shape))

    fwd = {}
    if not args.no_bench:
        for b in sorted({1, args.batch}):
            fwd[b] = forward_ms(args, b)
        if fwd.get(1) is not None:
            log("forward alone (bench): batch 1 %.3f ms, batch %d %.3f ms (%.1f windows/s)" % (
                fwd[1], args.batch, fwd[args.batch], 1000.0 * args.batch / fwd[args.batch]))

    query = "/v1/audio/embeddings" + ("?" + "&".join((["pool=mean"] if args.pool else []) +
                                                     (["outtype=f16"] if args.outtype == "f16" else []))
                                      if args.pool or args.outtype == "f16" else "")
    levels, failed = [], False
    srv = Server(args, args.work, max(clients))
    try:
        st, body = get(srv.port, "/v1/models")
        meta = json.loads(body)["data"][0]["meta"]
        log("server ready in %.2f s: %s" % (srv.ready_s, " ".join(srv.cmd[1:])))
        run_level(srv.port, query, audio, 8, 8, 60, 1 << 30)          # warm-up
        reserve = 30.0 if not args.no_transformers else 5.0
        for nc, nr in zip(clients, n_reqs):
            cap = max(1.0, min(args.level_s, left(args) - reserve))
            m0 = metrics(srv.port)
            recs, wall, capped = run_level(srv.port, query, audio, nc, nr, cap, args.check_every, args.client_procs)
            m1 = metrics(srv.port)
            chk = check_level(recs, refs, tol)
            good = [r for r in recs if r["status"] == 200]
            lat = [r["s"] for r in good]
            srv_ms = [r["server_ms"] for r in good if r["server_ms"] is not None]
            d = {k: m1.get(k, 0) - m0.get(k, 0) for k in ("whisper_audio_batches_total", "whisper_audio_windows_total",
                                                           "whisper_audio_flushes_total")}
            # windows as the server's pipeline counts them (a .npy's first dimension is a tower's tokens)
            windows = d["whisper_audio_windows_total"]
            # the dispatcher thread's time split (its share of the level's wall time)
            disp = {part: (m1.get(DISP % part, 0) - m0.get(DISP % part, 0)) / wall for part in ("push", "rows", "poll")}
            lv = {"clients": nc, "requests": len(recs), "requests_asked": nr, "capped": capped, "wall_s": wall,
                  "req_per_s": len(good) / wall, "windows": windows, "windows_per_s": windows / wall,
                  "p50_ms": pct(lat, 50) * 1000, "p99_ms": pct(lat, 99) * 1000, "mean_ms": statistics.fmean(lat) * 1000 if lat else None,
                  "server_p50_ms": pct(srv_ms, 50), "batches": d["whisper_audio_batches_total"],
                  "flushes": d["whisper_audio_flushes_total"],
                  "batch_fill": d["whisper_audio_windows_total"] / d["whisper_audio_batches_total"] / args.batch
                  if d["whisper_audio_batches_total"] else None,
                  "vs_main": (windows / wall) / main_r["windows_per_s"], "dispatcher_share": disp, "checks": chk}
            levels.append(lv)
            ok = chk["n_failed"] == 0 and len(recs) > 0
            failed |= not ok
            log("%d clients (%d processes): %d requests in %.2f s%s: %.1f req/s, %.1f windows/s (x%.2f main's), p50 %.1f ms, p99 %.1f ms "
                "(server-side p50 %.1f ms); %d batches, fill %s; checks: %d/%d shapes, first rows %d exact + %d close, "
                "whole %d/%d exact + %d close, max rel L2 %.3g; dispatcher: push %.0f%%, rows %.0f%%, poll %.0f%% of the wall%s" % (
                    nc, max(1, min(args.client_procs, nc)), len(recs), wall, " (cut at %.0f s)" % cap if capped else "", lv["req_per_s"], lv["windows_per_s"],
                    lv["vs_main"], lv["p50_ms"], lv["p99_ms"], lv["server_p50_ms"], lv["batches"],
                    "%.2f" % lv["batch_fill"] if lv["batch_fill"] is not None else "-", chk["shape_ok"], len(recs), chk["exact"],
                    chk["close"], chk["whole_exact"], chk["whole_checked"], chk["whole_close"], chk["max_rel_l2"],
                    100 * disp["push"], 100 * disp["rows"], 100 * disp["poll"],
                    "" if ok else "; FAILED: " + "; ".join(chk["failures"])))
    finally:
        rc = srv.stop()
    if rc != 0:
        log("FAILED: the server exited with %s on SIGTERM: %s" % (rc, open(srv.log_path).read()[-1000:]))
        failed = True

    tf = None
    if not args.no_transformers:
        try:
            tf = transformers_peer(args, meta, audio, shape, args.tf_requests, max(1.0, min(args.level_s, left(args) - 3)))
            log("transformers (torch %s, transformers %s, %s, one request per call): %d requests in %.2f s: %.1f req/s, "
                "p50 %.1f ms, p99 %.1f ms%s" % (tf["torch"], tf["transformers"], tf["dtype"], tf["requests"], tf["wall_s"],
                                                tf["req_per_s"], tf["p50_ms"], tf["p99_ms"],
                                                "; %d answers of a wrong shape" % tf["shape_bad"] if tf["shape_bad"] else ""))
            failed |= tf["shape_bad"] > 0
        except Exception:
            import traceback
            log("transformers: FAILED:\n" + traceback.format_exc())
            failed = True

    # the targets
    targets = {}
    for lv in levels:
        if lv["clients"] == 64:
            targets["64 clients windows/s >= 85% of main's"] = (lv["vs_main"] >= 0.85, "%.0f%%" % (100 * lv["vs_main"]))
        if lv["clients"] == 1 and fwd.get(1) is not None:
            targets["1 client p50 <= forward at batch 1 + 3 ms"] = (lv["p50_ms"] <= fwd[1] + 3, "%.1f ms vs %.1f + 3 ms" % (
                lv["p50_ms"], fwd[1]))

    table = ["| clients | req/s | windows/s | p50 ms | p99 ms | vs main windows/s |", "|---|---|---|---|---|---|"]
    for lv in levels:
        table.append("| %d%s | %.1f | %.1f | %.1f | %.1f | %.2f |" % (lv["clients"], " (cut)" if lv["capped"] else "", lv["req_per_s"],
                                                                     lv["windows_per_s"], lv["p50_ms"], lv["p99_ms"], lv["vs_main"]))
    table.append("| main -b %d, %d files | | %.1f | | | 1.00 |" % (args.batch, main_r["windows"], main_r["windows_per_s"]))
    if fwd.get(args.batch) is not None:
        table.append("| forward alone, batch %d (bench) | | %.1f | %.1f (batch 1) | | %.2f |" % (
            args.batch, 1000.0 * args.batch / fwd[args.batch], fwd.get(1) or float("nan"),
            1000.0 * args.batch / fwd[args.batch] / main_r["windows_per_s"]))
    if tf:
        table.append("| transformers, 1 at a time | %.1f | %.1f | %.1f | %.1f | %.2f |" % (
            tf["req_per_s"], tf["windows_per_s"], tf["p50_ms"], tf["p99_ms"], tf["windows_per_s"] / main_r["windows_per_s"]))
    note = ("%s %s, %s, -b %d, %d distinct %d s clips (1 window each), %s answers (Accept: application/x-npy); latency: client-side, "
            "connect to last byte; main: windows over its run timing (decode to the last .npy written, load/init excluded); "
            "transformers: WAV bytes to f32 rows on the host, sdpa, one request per call, no HTTP." % (
                os.path.basename(args.model), args.device, args.dtype if args.device == "cuda" else "f32", args.batch, len(clips),
                CLIP_S, ("pooled " if args.pool else "") + args.outtype))
    summary = ("FAILED (answers)" if failed else "all answers ok") + "; " + "; ".join(
        "%s: %s (%s)" % (k, "met" if v[0] else "missed", v[1]) for k, v in targets.items())
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "server-bench.json"), "w") as f:
        json.dump({"model": args.model, "device": args.device, "dtype": args.dtype, "batch": args.batch, "pool": args.pool,
                   "outtype": args.outtype, "clip_s": CLIP_S, "n_clips": len(clips), "tol": tol, "main": main_r,
                   "forward_ms": {str(k): v for k, v in fwd.items()}, "levels": levels, "transformers": tf,
                   "targets": {k: {"met": v[0], "value": v[1]} for k, v in targets.items()}, "failed": failed,
                   "wall_s": time.monotonic() - T_START}, f, indent=1)
    shutil.rmtree(os.path.join(args.work, "main-out"), ignore_errors=True)
    print()
    print("\n".join(table))
    print(note)
    print("serverbench: %s; %.0f s in all" % (summary, time.monotonic() - T_START))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
