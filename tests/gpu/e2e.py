#!/usr/bin/env python3
"""The whole path, side by side on one GPU: ./main on real-world audio against transformers'
pipeline in the same run, against our own forward alone (./bench) and against our decoder
alone on all cores (./bench --decode-only): the two limits a run cannot beat.

Inputs, each as one long file (an hour) and as 1000 files of 5 s (one window each):
  wav16  16 kHz mono s16 WAV: tests/data's 70 s speech tiled; the baseline
  wav44  44.1 kHz stereo s16 WAV          \
  flac   44.1 kHz stereo FLAC              | from build/carry/audio (tests/gpu/make-audio-carry.sh):
  mp3    48 kHz stereo MP3, 128 kbit/s     | 5 s clips of speech + noise. The GPU machine has no
  opus   48 kHz stereo Opus, 96 kbit/s    /  encoder: this script builds the long files from them
The 1000 files are hard links to the clip under distinct names (real files; copies where the
file system has no links). The long ones: wav44 the clip tiled; mp3 the clip's frames repeated
(the clip has no Xing/LAME frame or ID3 tag: a stream of frames); opus the clip's packets in one
new logical stream (concatenated Ogg files would be a chained stream, which our decoder reads as
one input but libsndfile, so soundfile, reads only its first link); flac written by soundfile
(compression level 0) from the WAV clip tiled: FLAC frames carry their number and a CRC, so
they do not concatenate.

Models: base and large-v3 with random weights (the converter's --random), bf16 by default,
batch 32. Rows (--rows, globs over KIND:SHAPE:OUT): every kind as hour and files, pooled
(--pool mean), and the 16 kHz hour as full rows, f32 and f16 (--outtype f16), written to a file
in --work (the repository's disk by default), whose own write bandwidth dd measures in the same
run (fdatasync'ed, and into the page cache).

Per row:
  ours          ./main one call over the hour or a --list of the files, -t = every core; its
                --json "run" (decode, resample, log-mel, forward, download, pooling, writing;
                load and init apart) and "decode"; GPU busy and peak device memory (nvidia-smi
                every 20 ms), peak host RSS
  transformers  in the same run: soundfile decodes (else s16 WAV through the wave module, else
                torchaudio.load, which from torchaudio 2.9 on needs torchcodec: not on the GPU
                machine's package list), the channels averaged and
                the audio resampled to 16 kHz on the GPU (torchaudio.transforms.Resample: its
                functional.resample with the kernel built once per rate), 30 s windows,
                WhisperFeatureExtractor on the GPU 32 windows at a time, WhisperEncoder sdpa in
                the same dtype, rows to the host (pooled on the GPU for pooled rows; f32 or f16
                for full rows, not written to disk), after a warm-up batch; one thread, as a
                user's loop. It runs a part of each input (--tf-seconds of the hour, --tf-files
                of the files), as its rate is per window: the ratio stands, in less device time
  forward alone ./bench -b 32: the forward per window (mel input, no transfers)
  decode-alone  ./bench --decode-only -t <every core> over the same files: 16 kHz mono out,
                no model, through the reader main uses (a long WAV or FLAC in segments on every
                worker; a long MP3 or Opus on one)

The table printed last gives ours against transformers (windows/s, which is files/s for the
files), ours against max(forward alone, decode-alone), 44.1 kHz WAV against 16 kHz mono for
large-v3, and the full rows' MB/s against the disk's.

Expected device time, leads: from decode rates measured on the project's 2-core Xeon (loaded)
with the code of 2026-12-02 (main's reader decodes files on several workers, a long file on one;
./bench --decode-only, one thread on one long file: WAV 44.1k ~1900x real time, FLAC ~900x, MP3
~770x, Opus ~180x; soundfile's MP3 ~275x, Opus ~70x) and issue 21's H200 figures. Per model,
ours: hours wav16 1 s, wav44 2 s, flac 4 s, mp3 5 s, opus 20 s; 1000 files 1-2 s each, opus 3-5
s; full rows 2-3 s each; model load + init about 1.5 s a row for large-v3. transformers at the
default --tf-seconds 300 and --tf-files 160: 1-5 s a row, opus files 12 s (soundfile's Opus).
Once for both models: inputs 10 s (the FLAC hour 5 s of it), dd 2 s, decode-alone about 37 s (31
of it the hours, one thread each; the opus hour 20). In all about 4 minutes for base and
large-v3. To fit a shorter call: E2E_ROWS / --rows for a part of the rows (e.g. 'wav*,flac*' in
one call, 'mp3*,opus*' in another), --files fewer files.

Run on the GPU machine from the repository root, after `make -j16` (tests/gpu/run-all.sh step
e2e, which sources tests/gpu/audio-env.sh on a carried build/carry/audio first):
    python3 tests/gpu/e2e.py [--sizes base,large-v3] [--dtypes bf16] [--rows 'mp3:*,*:hour:pool']
On a CPU, to check the script itself (the micro model, a few files, short inputs, transformers
on the CPU where torch is installed):
    python3 tests/gpu/e2e.py --smoke
"""
import argparse
import fnmatch
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import threading
import time
import wave
import zlib

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CARRY = os.path.join(ROOT, "build/carry/audio/clips")
# d_model, layers, heads, ffn, mels; micro: tests/data/micro-80 (--smoke)
SIZES = {"base": (512, 6, 8, 2048, 80), "large-v3": (1280, 32, 20, 5120, 128), "micro": (128, 2, 2, 512, 80)}
KINDS = {"wav16": "16k mono WAV", "wav44": "44.1k stereo WAV", "flac": "44.1k stereo FLAC", "mp3": "48k MP3",
         "opus": "48k Opus"}
CLIP_S = 5
DEFAULT_ROWS = ",".join([f"{k}:{s}:pool" for k in KINDS for s in ("hour", "files")] + ["wav16:hour:f32", "wav16:hour:f16"])

try:
    import soundfile
except ImportError:       # the GPU machine has it only from the carried wheels
    soundfile = None


class Skip(Exception):
    """A row that cannot run here (a missing clip, library or build flag): reported, not fatal."""


# ---- inputs ---------------------------------------------------------------------------

def read_wav(path):
    with wave.open(path) as w:
        return w.getnchannels(), w.getsampwidth(), w.getframerate(), w.readframes(w.getnframes())


def tiled_wav(path, src, seconds):
    """src's frames repeated (or cut) to seconds, same format."""
    ch, width, rate, frames = read_wav(src)
    need = seconds * rate * ch * width
    with wave.open(path, "wb") as w:
        w.setnchannels(ch)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes((frames * (need // len(frames) + 1))[:need])


def concatenated(path, src, copies):
    """An MP3 of frames alone (no tag) repeated: one stream of frames."""
    data = open(src, "rb").read()
    with open(path, "wb") as f:
        for _ in range(copies):
            f.write(data)


# Ogg's CRC-32 (polynomial 0x04c11db7, most significant bit first, start 0, no final xor) through
# zlib's, which is the same CRC reflected: over the bytes bit-reversed, its result bit-reversed
# (zlib's start and final xor of 0xffffffff undone by the start value and the xor). C speed.
REV8 = bytes(int(f"{b:08b}"[::-1], 2) for b in range(256))


def ogg_crc(page):
    r = zlib.crc32(page.translate(REV8), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{r:032b}"[::-1], 2)


def ogg_packets(data):
    """The packets of a single-stream Ogg file, in order (RFC 3533: pages of lacing values)."""
    pos, pkt, packets = 0, b"", []
    while pos < len(data):
        if data[pos:pos + 4] != b"OggS":
            raise ValueError("not an Ogg page at byte %d" % pos)
        n_seg = data[pos + 26]
        body = pos + 27 + n_seg
        for lace in data[pos + 27:body]:
            pkt += data[body:body + lace]
            body += lace
            if lace < 255:                                 # a lacing value under 255 ends a packet
                packets.append(pkt)
                pkt = b""
        pos = body
    return packets


def opus_samples(pkt):
    """48 kHz samples in an Opus packet: frame size from the TOC byte's config, frame count from its
    code (RFC 6716 3.1)."""
    config, code = pkt[0] >> 3, pkt[0] & 3
    size = (480, 960, 1920, 2880)[config % 4] if config < 12 else (480, 960)[config % 2] if config < 16 else \
        (120, 240, 480, 960)[config % 4]
    return size * (1 if code == 0 else 2 if code < 3 else pkt[1] & 0x3F)


def ogg_page(flags, granule, serial, seq, packets):
    lacing = b"".join(bytes([255] * (len(p) // 255) + [len(p) % 255]) for p in packets)
    head = struct.pack("<4sBBqIIIB", b"OggS", 0, flags, granule, serial, seq, 0, len(lacing)) + lacing
    page = head + b"".join(packets)
    return page[:22] + struct.pack("<I", ogg_crc(page)) + page[26:]


def opus_long(path, src, copies):
    """One logical Ogg Opus stream: src's two header packets, then its audio packets copies times,
    in pages of up to 50 packets (1 s), granule positions counting every sample (no end trim)."""
    data = open(src, "rb").read()
    packets = ogg_packets(data)
    serial = struct.unpack_from("<I", data, 14)[0]
    audio = packets[2:]
    with open(path, "wb") as f:
        f.write(ogg_page(2, 0, serial, 0, [packets[0]]))          # OpusHead, beginning of stream
        f.write(ogg_page(0, 0, serial, 1, [packets[1]]))          # OpusTags
        seq, granule, page = 2, 0, []
        stream = [p for _ in range(copies) for p in audio]
        for i, p in enumerate(stream):
            page.append(p)
            granule += opus_samples(p)
            last = i == len(stream) - 1
            if len(page) == 50 or last:
                f.write(ogg_page(4 if last else 0, granule, serial, seq, page))
                seq, page = seq + 1, []


def flac_long(path, src_wav, seconds):
    if soundfile is None:
        raise Skip("no soundfile to write the long FLAC (carry build/carry/audio: its wheels)")
    ch, width, rate, frames = read_wav(src_wav)
    x = np.frombuffer(frames, dtype=np.int16).reshape(-1, ch)
    n = seconds * rate
    soundfile.write(path, np.tile(x, (n // len(x) + 1, 1))[:n], rate, subtype="PCM_16", format="FLAC",
                    compression_level=0.0)


def clip_path(kind, work):
    """The 5 s clip of a kind (the 16 kHz one is cut from tests/data's speech here)."""
    if kind == "wav16":
        p = os.path.join(work, "clip_16k.wav")
        if not os.path.exists(p):
            tiled_wav(p, os.path.join(ROOT, "tests/data/audio/long_70s_16k.wav"), CLIP_S)
        return p
    p = os.path.join(CARRY, {"wav44": "clip_44k1_stereo.wav", "flac": "clip_44k1_stereo.flac", "mp3": "clip_48k.mp3",
                             "opus": "clip_48k_a.opus"}[kind])
    if not os.path.exists(p):
        raise Skip(f"no {p} (tests/gpu/make-audio-carry.sh makes it; carry build/carry/audio)")
    return p


def make_input(kind, shape, work, hour_s, n_files):
    """The input files of a row: [the long file] or the n_files names of the clip."""
    clip = clip_path(kind, work)
    ext = os.path.splitext(clip)[1]
    if shape == "files":
        d = os.path.join(work, f"files-{kind}")
        os.makedirs(d, exist_ok=True)
        paths = [os.path.join(d, f"f{i:05d}{ext}") for i in range(n_files)]
        for p in paths:
            if not os.path.exists(p):
                try:
                    os.link(clip, p)
                except OSError:                          # no hard links there: a copy
                    shutil.copyfile(clip, p)
        return paths
    p = os.path.join(work, f"long-{kind}{ext}")
    if not os.path.exists(p):
        copies = -(-hour_s // CLIP_S)
        if kind == "wav16":
            tiled_wav(p, os.path.join(ROOT, "tests/data/audio/long_70s_16k.wav"), hour_s)
        elif kind == "wav44":
            tiled_wav(p, clip, hour_s)
        elif kind == "mp3":
            concatenated(p, clip, copies)
        elif kind == "opus":
            opus_long(p, clip, copies)
        else:
            flac_long(p, clip_path("wav44", work), hour_s)
    return [p]


def write_list(paths, work, name):
    lst = os.path.join(work, name + ".list")
    with open(lst, "w") as f:
        f.write("\n".join(paths) + "\n")
    return lst


# ---- our side -------------------------------------------------------------------------

class GpuSampler:
    """nvidia-smi every 20 ms: mean utilisation and peak memory used while running (nan without it)."""

    def __init__(self):
        self.util, self.mem, self.proc = [], [], None
        if not shutil.which("nvidia-smi"):
            return
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits",
                                      "-lms", "20"], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        for line in self.proc.stdout:
            try:
                u, m = (float(x) for x in line.split(",")[:2])
            except ValueError:
                continue
            self.util.append(u)
            self.mem.append(m)

    def done(self):
        if self.proc:
            self.proc.terminate()
            self.thread.join(timeout=2)
        return (sum(self.util) / len(self.util) if self.util else float("nan"), max(self.mem) if self.mem else float("nan"))


def run_main(args, model, lst, dtype, extra, work):
    out = os.path.join(work, "out.npy")
    cmd = [os.path.join(ROOT, "main"), "-m", model, "--list", lst, "-b", str(args.batch), "--device", args.device,
           "--dtype", dtype, "-t", str(args.threads), "--no-progress", "--json", "-o", out] + extra
    idle = GpuSampler()
    time.sleep(0.3 if idle.proc else 0)
    base_mem = idle.done()[1]
    sampler = GpuSampler()
    t0 = time.time()
    with open(out + ".stdout", "w+") as so, open(out + ".stderr", "w+") as se:
        p = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        _, status, ru = os.wait4(p.pid, 0)                     # this child's own peak RSS
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    wall = time.time() - t0
    util, peak_mem = sampler.done()
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {stderr[-2000:]}")
    j = json.loads(stdout)
    t = j["timings_ms"]
    size = os.path.getsize(out)
    os.remove(out)
    return {"windows": j["windows"], "files": len(j["files"]), "seconds": sum(f["seconds"] for f in j["files"]),
            "format": j["files"][0]["format"], "run_ms": t["run"], "ms_per_window": t["run"] / j["windows"],
            "windows_per_s": 1000.0 * j["windows"] / t["run"], "load_ms": t["load"], "init_ms": t["init"],
            "init_pipeline_ms": t["init_pipeline"], "decode_ms": t["decode"], "decode_wait_ms": t.get("decode_wait", float("nan")),
            "worker_ms": t["encode"], "gpu_busy": util,
            "dev_mem_mib": peak_mem - base_mem, "out_mb": size / 1e6, "mb_per_s": size / 1e3 / t["run"],
            "peak_rss_mib": ru.ru_maxrss / 1024.0, "wall_s": wall}


def forward_alone(args, model, dtype):
    """ms per window of the forward alone (./bench's compute, mel input, no transfers)."""
    b, n = (args.batch, 10) if not args.smoke else (2, 2)
    r = subprocess.run([os.path.join(ROOT, "bench"), "-m", model, "--device", args.device, "--dtype", dtype, "-b", str(b),
                        "-n", str(n), "-t", str(args.threads)], capture_output=True, text=True, check=True)
    m = re.search(r"of which compute [\d.]+ ms \(([\d.]+) ms per clip\)", r.stdout)
    if not m:
        raise RuntimeError(r.stdout + r.stderr)
    return float(m.group(1))


def decode_alone(args, lst):
    """./bench --decode-only on every core over a list: its wall and busy ms."""
    r = subprocess.run([os.path.join(ROOT, "bench"), "--decode-only", "-t", str(args.threads), "--list", lst],
                       capture_output=True, text=True)
    m = re.search(r"(\d+) files, ([\d.]+) s of audio .*?, (\d+) workers: wall ([\d.]+) ms, busy ([\d.]+) ms", r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"bench --decode-only failed: {r.stdout}{r.stderr}")
    return {"files": int(m.group(1)), "audio_s": float(m.group(2)), "threads": int(m.group(3)), "wall_ms": float(m.group(4)),
            "busy_ms": float(m.group(5))}


def disk_bandwidth(work, mib):
    """dd of mib MiB of zeros into work: MB/s with fdatasync (the disk) and without (the page cache)."""
    f = os.path.join(work, "dd.bin")
    res = {}
    for name, conv in (("disk", ["conv=fdatasync"]), ("cache", [])):
        t0 = time.time()
        subprocess.run(["dd", "if=/dev/zero", f"of={f}", "bs=1M", f"count={mib}"] + conv, check=True, capture_output=True)
        res[name] = mib * 1.048576 / (time.time() - t0)
        os.remove(f)
    df = subprocess.run(["df", "-T", work], capture_output=True, text=True).stdout.splitlines()[-1].split()
    res["fs"] = f"{df[1]} on {df[0]}"
    return res


# ---- transformers' side ---------------------------------------------------------------

class Transformers:
    """transformers' WhisperEncoder (random weights, sdpa) and feature extractor on args.device."""

    def __init__(self, size, dtype_name, device):
        import torch
        from transformers import WhisperConfig, WhisperFeatureExtractor
        from transformers.models.whisper.modeling_whisper import WhisperEncoder
        try:
            import torchaudio
            self.torchaudio = torchaudio
        except ImportError:
            self.torchaudio = None
        d, n_layer, n_head, ff, n_mels = SIZES[size]
        self.torch, self.device = torch, device
        self.dtype = torch.float32 if device == "cpu" else {"f16": torch.float16, "bf16": torch.bfloat16}[dtype_name]
        # (the encoder has no vocabulary: Whisper's own size keeps the config's default token ids valid)
        cfg = WhisperConfig(d_model=d, encoder_layers=n_layer, encoder_attention_heads=n_head, encoder_ffn_dim=ff,
                            decoder_layers=1, decoder_attention_heads=n_head, decoder_ffn_dim=ff, num_mel_bins=n_mels,
                            max_source_positions=1500, vocab_size=51866, attn_implementation="sdpa")
        torch.manual_seed(0)
        with torch.device(device):
            self.enc = WhisperEncoder(cfg).to(self.dtype).eval()
        self.fe = WhisperFeatureExtractor(feature_size=n_mels)
        self.resamplers = {}

    def load(self, path, seconds):
        """The first seconds (None: all) of path as 16 kHz mono float32, in host memory for the
        feature extractor (which takes numpy alone); the channels averaged and the audio resampled
        on the device."""
        torch = self.torch
        if soundfile is not None:
            with soundfile.SoundFile(path) as f:
                rate = f.samplerate
                x = f.read(-1 if seconds is None else int(seconds * rate), dtype="float32", always_2d=True)
        elif path.endswith(".wav") and read_wav(path)[1] == 2:
            ch, width, rate, frames = read_wav(path)
            x = np.frombuffer(frames, dtype=np.int16).reshape(-1, ch).astype(np.float32) / 32768.0
            if seconds is not None:
                x = x[:int(seconds * rate)]
        else:
            try:
                y, rate = self.torchaudio.load(path)
                x = y.T.numpy()
            except Exception as e:                   # (torchcodec missing, or no torchaudio at all)
                raise Skip(f"no soundfile, and torchaudio.load failed ({str(e).splitlines()[0][:100]}); "
                           "carry build/carry/audio: its wheels") from None
            if seconds is not None:
                x = x[:int(seconds * rate)]
        if rate == 16000 and x.shape[1] == 1:
            return x[:, 0]                                        # already what the extractor takes
        t = torch.from_numpy(np.ascontiguousarray(x)).to(self.device).mean(dim=1)
        if rate != 16000:
            if self.torchaudio is None:
                raise Skip("no torchaudio to resample")
            if rate not in self.resamplers:
                self.resamplers[rate] = self.torchaudio.transforms.Resample(rate, 16000).to(self.device)
            t = self.resamplers[rate](t)
        return t.cpu().numpy()

    def run(self, paths, seconds, pool, outtype):
        """Every path decoded, cut into 30 s windows, 32 windows a batch: features, encoder, rows
        on the host. Returns the number of windows."""
        torch = self.torch
        pending, rows, n_win = [], [], 0

        def flush(windows):
            feats = self.fe(windows, sampling_rate=16000, return_tensors="pt", device=self.device).input_features
            h = self.enc(feats.to(self.device, self.dtype)).last_hidden_state
            rows.append((h.float().mean(dim=1) if pool else h.half() if outtype == "f16" else h.float()).cpu())

        with torch.no_grad():
            for p in paths:
                x = self.load(p, seconds)
                for i in range(0, max(len(x), 1), 480000):
                    pending.append(x[i:i + 480000])
                    n_win += 1
                    if len(pending) == 32:
                        flush(pending)
                        pending = []
            if pending:
                flush(pending)
        if self.device != "cpu":
            torch.cuda.synchronize()
        return n_win

    def time(self, paths, seconds, pool, outtype):
        self.run(paths[:32], 30 if seconds else None, pool, outtype)       # warm-up: one batch
        t0 = time.time()
        n_win = self.run(paths, seconds, pool, outtype)
        ms = (time.time() - t0) * 1000.0
        return {"windows": n_win, "files": len(paths), "ms": ms, "ms_per_window": ms / n_win, "windows_per_s": 1000.0 * n_win / ms}

    def free(self):
        del self.enc
        if self.device != "cpu":
            self.torch.cuda.empty_cache()


# ---- the run --------------------------------------------------------------------------

def audio_flags():
    """The decoders this build has (-DWHISPER_AUDIO_* in build/flags: the compiler's flags)."""
    try:
        flags = open(os.path.join(ROOT, "build/flags")).read()
    except OSError:
        return "unknown (no build/flags)"
    return " ".join(re.findall(r"-DWHISPER_AUDIO_(OGG|FLAC|MP3|OPUS)\b", flags)) or "none"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="base,large-v3")
    ap.add_argument("--dtypes", default="bf16")
    ap.add_argument("--rows", default=os.environ.get("E2E_ROWS", DEFAULT_ROWS),
                    help="KIND:SHAPE:OUT globs, comma-separated (KIND wav16 wav44 flac mp3 opus, SHAPE hour files, OUT pool f32 f16)")
    ap.add_argument("--hour", type=int, default=3600, help="seconds of the long inputs")
    ap.add_argument("--files", type=int, default=1000, help="5 s files of the files rows")
    ap.add_argument("--tf-seconds", type=int, default=300, help="transformers: seconds of each long input it runs")
    ap.add_argument("--tf-files", type=int, default=160, help="transformers: files of the files rows it runs")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dd-mib", type=int, default=1024)
    ap.add_argument("--work", default=os.path.join(ROOT, "build/e2e-work"), help="inputs and outputs (removed after)")
    ap.add_argument("--out", default=os.path.join(ROOT, "build/gpu-logs"))
    ap.add_argument("--smoke", action="store_true", help="the CPU, the micro model, 3 files, 65 s inputs: checks the script")
    args = ap.parse_args()
    if args.smoke:
        args.sizes, args.dtypes, args.device = "micro", "f16", "cpu"      # (the CPU computes in f32 whatever --dtype)
        args.hour, args.files, args.tf_seconds, args.tf_files, args.dd_mib = 65, 3, 65, 2, 16
    os.makedirs(args.out, exist_ok=True)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    t_start = time.time()
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        have_tf = True
    except ImportError:
        have_tf = False
    print(f"e2e: build decoders: {audio_flags()}; soundfile {soundfile.__version__ if soundfile else 'missing'}; "
          f"transformers {'there' if have_tf else 'missing: its side skipped'}; {args.threads} threads", flush=True)

    every = [f"{k}:{s}:{o}" for k in KINDS for s in ("hour", "files") for o in ("pool", "f32", "f16")]
    rows = [r for r in every if any(fnmatch.fnmatch(r, g) for g in args.rows.split(","))]
    inputs, skipped = {}, {}                  # (kind, shape) -> paths / reason
    t0 = time.time()
    for kind, shape in dict.fromkeys(tuple(r.split(":")[:2]) for r in rows):
        try:
            inputs[kind, shape] = make_input(kind, shape, args.work, args.hour, args.files)
        except Skip as e:
            skipped[kind, shape] = str(e)
            print(f"e2e: {kind} {shape}: skipped: {e}", flush=True)
    print(f"e2e: inputs made in {time.time() - t0:.1f} s", flush=True)
    disk = disk_bandwidth(args.work, args.dd_mib) if any(r.endswith(("f32", "f16")) for r in rows) else None
    if disk:
        print(f"e2e: disk: dd {args.dd_mib} MiB into {args.work} ({disk['fs']}): {disk['disk']:.0f} MB/s with fdatasync, "
              f"{disk['cache']:.0f} MB/s into the page cache", flush=True)

    decode = {}                               # (kind, shape) -> decode-alone, once for every model
    results = []
    for size in args.sizes.split(","):
        if size == "micro":
            model = os.path.join(ROOT, "build/micro-80-f32.gguf")
        else:
            model = os.path.join(ROOT, f"build/{size}-random.gguf")
            if not os.path.exists(model):
                subprocess.run([sys.executable, os.path.join(ROOT, "convert/convert-hf-to-gguf.py"), "--random", size, "-o", model],
                               check=True, capture_output=True)
        for dtype in args.dtypes.split(","):
            fwd = forward_alone(args, model, dtype)
            tf = Transformers(size, dtype, args.device) if have_tf else None
            for row in rows:
                kind, shape, out = row.split(":")
                if (kind, shape) in skipped:
                    continue
                t_row = time.time()
                paths = inputs[kind, shape]
                lst = write_list(paths, args.work, f"{kind}-{shape}")
                if (kind, shape) not in decode:
                    decode[kind, shape] = decode_alone(args, lst)
                extra = ["--pool", "mean"] if out == "pool" else ["--outtype", "f16"] if out == "f16" else []
                r = run_main(args, model, lst, dtype, extra, args.work)
                t = None
                if tf:
                    try:
                        t = tf.time(paths[:args.tf_files], args.tf_seconds if shape == "hour" else None, out == "pool", out)
                    except Skip as e:
                        print(f"e2e: {row}: transformers skipped: {e}", flush=True)
                d = decode[kind, shape]
                bound_ms = max(fwd * r["windows"], d["wall_ms"])
                label = f"{KINDS[kind]}, " + (f"{args.hour} s" if shape == "hour" else f"{len(paths)} x {CLIP_S} s") + ", " + \
                    {"pool": "--pool mean", "f32": "f32 rows", "f16": "f16 rows"}[out]
                x = {"size": size, "dtype": dtype, "row": row, "label": label, "forward_ms": fwd,
                     "decode_alone": d, "bound_ms": bound_ms, "ours": r, "transformers": t, "row_s": time.time() - t_row}
                results.append(x)
                tf_txt = (f", transformers {t['windows_per_s']:.1f} windows/s on {t['windows']} (ours x{r['windows_per_s'] / t['windows_per_s']:.2f})"
                          if t else "")
                print(f"e2e {size} {dtype} {row}: {r['files']} files, {r['seconds']:.0f} s ({r['format']}), {r['windows']} windows: "
                      f"{r['ms_per_window']:.3f} ms/window ({r['windows_per_s']:.1f}/s), run {r['run_ms']:.0f} ms, decode "
                      f"{r['decode_ms']:.0f} ms (waited for {r['decode_wait_ms']:.0f}), worker busy {r['worker_ms']:.0f} ms; forward alone {fwd:.3f} ms/window; decode-alone "
                      f"{d['wall_ms']:.0f} ms wall on {d['threads']} threads (busy {d['busy_ms']:.0f}); ours / max(forward, decode) "
                      f"x{r['run_ms'] / bound_ms:.2f}; out {r['out_mb']:.1f} MB ({r['mb_per_s']:.0f} MB/s); GPU busy {r['gpu_busy']:.0f}%, "
                      f"device +{r['dev_mem_mib']:.0f} MiB, RSS {r['peak_rss_mib']:.0f} MiB, load {r['load_ms']:.0f} + init "
                      f"{r['init_ms']:.0f} ms{tf_txt}; row {x['row_s']:.1f} s", flush=True)
            if tf:
                tf.free()
    shutil.rmtree(args.work, ignore_errors=True)
    with open(os.path.join(args.out, "e2e.json"), "w") as f:
        json.dump({"disk": disk, "skipped": {":".join(k): v for k, v in skipped.items()}, "rows": results}, f, indent=1)
    print_table(results, disk)
    print(f"e2e: {time.time() - t_start:.0f} s in all")
    return 0


def print_table(results, disk):
    """The last table: ratios against the targets of issue 21 (2x transformers, 1.2x the bound)."""
    nan = float("nan")
    print("\n| size | dtype | input | windows | ours ms/window | ours windows/s | transformers windows/s (windows) | ours / transformers | "
          "forward alone ms/window | decode-alone ms/window | ours / max(forward, decode) | ours decode ms | out MB/s | GPU busy | "
          "RSS MiB | load+init ms | targets: 2x transformers, 1.2x the bound |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for x in results:
        r, t, d = x["ours"], x["transformers"], x["decode_alone"]
        speedup = r["windows_per_s"] / t["windows_per_s"] if t else nan
        full = not x["row"].endswith("pool")
        # issue 21: ours at least 2x transformers (a single long MP3 or Opus, one thread on both
        # sides, is reported, not held to it) and within 1.2x of max(forward alone, decode-alone)
        one_thread = x["row"] in ("mp3:hour:pool", "opus:hour:pool")
        targets = ("-" if not t else "(one thread)" if one_thread else "ok" if speedup >= 2 else "MISS") + ", " + \
            ("ok" if r["run_ms"] / x["bound_ms"] <= 1.2 else "MISS")
        print(f"| {x['size']} | {x['dtype']} | {x['label']} | {r['windows']} | {r['ms_per_window']:.3f} | {r['windows_per_s']:.1f} | "
              f"{t['windows_per_s'] if t else nan:.1f} ({t['windows'] if t else 0}) | {speedup:.2f} | {x['forward_ms']:.3f} | "
              f"{d['wall_ms'] / r['windows']:.3f} | {r['run_ms'] / x['bound_ms']:.2f} | {r['decode_ms']:.0f} | "
              f"{r['mb_per_s'] if full else nan:.0f} | {r['gpu_busy']:.0f}% | {r['peak_rss_mib']:.0f} | {r['load_ms'] + r['init_ms']:.0f} | {targets} |")
    print()
    # A dataset user's figure: seconds of audio per second of the run is hours of audio per
    # GPU-hour (load and init apart, as they are paid once a run); transformers' from its windows/s
    # on the same input, whose windows hold the same audio as ours.
    print(f"| size | dtype | input | ours: hours of audio per GPU-hour | transformers' pipeline | ours / transformers | host cores |")
    print("|---|---|---|---|---|---|---|")
    for x in results:
        r, t = x["ours"], x["transformers"]
        per_window_s = r["seconds"] / r["windows"]
        ours_h = r["seconds"] / (r["run_ms"] / 1000)
        tf_h = t["windows_per_s"] * per_window_s if t else nan
        print(f"| {x['size']} | {x['dtype']} | {x['label']} | {ours_h:,.0f} | {tf_h:,.0f} | {ours_h / tf_h:.2f} | {os.cpu_count()} |")
    print()
    by = {(x["size"], x["dtype"], x["row"]): x for x in results}
    for (size, dtype, row), x in by.items():
        kind, shape, out = row.split(":")
        base = by.get((size, dtype, f"wav16:{shape}:{out}"))
        if kind == "wav44" and base:
            print(f"ratio {size} {dtype} {shape} {out}: 44.1k stereo WAV / 16k mono WAV x{x['ours']['ms_per_window'] / base['ours']['ms_per_window']:.2f} "
                  f"(target for large-v3: at most 1.2)")
        if out in ("f32", "f16") and disk:
            print(f"ratio {size} {dtype} {row}: {x['ours']['out_mb']:.0f} MB at {x['ours']['mb_per_s']:.0f} MB/s; the disk "
                  f"{disk['disk']:.0f} MB/s (fdatasync), the page cache {disk['cache']:.0f} MB/s; ours / forward alone "
                  f"x{x['ours']['ms_per_window'] / x['forward_ms']:.2f} (targets: large-v3 f32 rows within 1.3x of the forward where the "
                  f"disk allows; f16 rows at least as fast as f32)")


if __name__ == "__main__":
    sys.exit(main())
