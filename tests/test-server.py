#!/usr/bin/env python3
"""whisper-audio-server over loopback against main, bit for bit (make test-server, in make test).

Starts the server (WA_SERVER) on 127.0.0.1 with --port 0, reads the port it prints, and sends a
bounded number of requests with Python's http.client (and curl where installed): every endpoint,
raw/multipart/JSON bodies, float/base64/.npy answers, 64 concurrent clients with mixed clips and
options, hostile bodies, the API key, and a SIGTERM with requests in flight. Each answer's values
are compared byte for byte with what main (WA_MAIN) writes for the same audio, model and options.
Standard library only. Skips, with a message, when the server was not built (no cpp-httplib).
"""
import atexit
import base64
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import wave
from concurrent.futures import ThreadPoolExecutor

MAIN = os.environ.get("WA_MAIN", "build/main")
SERVER = os.environ.get("WA_SERVER", "")
MICRO = "build/micro-80-f32.gguf"
TOWER = "build/tower-qwen2a-f32.gguf"
DEADLINE = time.monotonic() + 300          # the whole test, at most
PASSED = 0


def ok(what):
    global PASSED
    PASSED += 1
    print(f"test-server: ok: {what}", flush=True)


def fail(what):
    print(f"test-server: FAILED: {what}", flush=True)
    for s in list(SERVERS):
        s.kill()
    sys.exit(1)


def check(cond, what):
    if not cond:
        fail(what)


if not SERVER or not os.path.exists(SERVER):
    print("test-server: skipped: whisper-audio-server was not built (cpp-httplib missing: make deps installs "
          "libcpp-httplib-dev)")
    sys.exit(0)
for path in (MAIN, MICRO, TOWER):
    check(os.path.exists(path), f"{path} is missing (make {path})")

TMP = tempfile.mkdtemp(prefix="whisper-audio-server.")
SERVERS = []


def watchdog():
    print("test-server: FAILED: the test ran past its 300 s", flush=True)
    for srv_ in list(SERVERS):
        srv_.kill()
    os._exit(1)


def kill_servers():
    for srv_ in list(SERVERS):
        srv_.kill()


atexit.register(kill_servers)       # an exception in the test leaves no server behind either
_timer = threading.Timer(DEADLINE - time.monotonic(), watchdog)
_timer.daemon = True
_timer.start()


# ---- clips and main's answers ------------------------------------------------------------

def write_wav(path, frames, rate=16000, channels=1):
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)


with wave.open("samples/speech_16k.wav") as w:
    SPEECH = w.readframes(w.getnframes())
CLIPS = {}
for name, n in (("a", 16000 * 3), ("b", 16000 * 7 + 123), ("d", 16000 * 40 + 777)):
    CLIPS[name] = os.path.join(TMP, name + ".wav")
    write_wav(CLIPS[name], (SPEECH * (2 * n // len(SPEECH) + 1))[:2 * n])
# 22.05 kHz stereo: decoded and resampled by the library on both sides
stereo = b"".join(SPEECH[i:i + 2] * 2 for i in range(0, 2 * 22050 * 5, 2))
CLIPS["s"] = os.path.join(TMP, "s.wav")
write_wav(CLIPS["s"], stereo, rate=22050, channels=2)
AUDIO = {k: open(v, "rb").read() for k, v in CLIPS.items()}

# options as the server takes them -> main's flags
OPTIONS = {
    "": {},
    "pool": {"pool": "mean"},
    "nopad": {"no_pad": True},
    "layer0": {"layer": 0},
    "f16": {"outtype": "f16"},
    "noln": {"final_ln": False},
}


def main_flags(opts):
    f = []
    for k, v in opts.items():
        f += {"pool": ["--pool", "mean"], "no_pad": ["--no-pad"], "layer": ["--layer", str(v)],
              "outtype": ["--outtype", str(v)], "final_ln": [] if v else ["--no-final-ln"],
              "projector": [] if v else ["--no-projector"]}[k]
    return f


REF = {}


def reference(model, clip, opts):
    """main's .npy for clip with opts: (shape header, data bytes, whole file)."""
    key = (model, clip, json.dumps(opts, sort_keys=True))
    if key not in REF:
        out = os.path.join(TMP, f"ref-{len(REF)}.npy")
        r = subprocess.run([MAIN, "-m", model, "-f", CLIPS[clip], "-o", out, "--device", "cpu", "-t", "2",
                            "--no-progress"] + main_flags(opts), capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, f"main failed: {r.stderr[-2000:]}")
        whole = open(out, "rb").read()
        header = whole[10:128].decode("latin1")
        shape = [int(x) for x in re.search(r"'shape': \(([^)]*)\)", header).group(1).replace(" ", "").split(",") if x]
        REF[key] = (shape, whole[128:], whole)
    return REF[key]


# ---- the server and its client -----------------------------------------------------------

class Server:
    def __init__(self, model, *args):
        self.log_path = os.path.join(TMP, f"server-{len(SERVERS)}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([SERVER, "-m", model, "--port", "0", "--device", "cpu", "-t", "2", *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        SERVERS.append(self)
        self.port = None
        t_end = time.monotonic() + 30
        while time.monotonic() < t_end and self.port is None:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(self.log_path).read())
            if m:
                self.port = int(m.group(1))
            elif self.proc.poll() is not None:
                fail(f"the server exited: {open(self.log_path).read()[-2000:]}")
            time.sleep(0.02)
        check(self.port, "the server printed no port")
        while time.monotonic() < t_end:
            try:
                if request(self, "GET", "/health")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        fail("the server did not become ready")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def request(srv, method, path, body=None, headers=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def query(opts):
    if not opts:
        return ""
    return "?" + "&".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in opts.items())


def embed(srv, clip, opts, form="npy", headers=None):
    """One request in one of the body/answer forms; returns (status, [(shape, bytes)] or error)."""
    h = dict(headers or {})
    if form == "npy":                  # raw body, no Content-Type, options in the query, a .npy back
        h["Accept"] = "application/x-npy"
        st, _, body = request(srv, "POST", "/v1/audio/embeddings" + query(opts), AUDIO[clip], h)
        if st != 200:
            return st, json.loads(body)
        return st, [(None, body)]
    if form == "multipart":
        b = "----wa-test-boundary"
        parts = [f'--{b}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{str(v).lower() if isinstance(v, bool) else v}\r\n'.encode()
                 for k, v in opts.items()]
        parts.append(f'--{b}\r\nContent-Disposition: form-data; name="file"; filename="x.wav"\r\n'
                     f'Content-Type: audio/wav\r\n\r\n'.encode() + AUDIO[clip] + b"\r\n")
        h["Content-Type"] = f"multipart/form-data; boundary={b}"
        st, _, body = request(srv, "POST", "/v1/audio/embeddings", b"".join(parts) + f"--{b}--\r\n".encode(), h)
    else:                              # JSON: base64 in, float or base64 out
        clips = clip if isinstance(clip, list) else [clip]
        doc = dict(opts, input=[base64.b64encode(AUDIO[c]).decode() for c in clips] if isinstance(clip, list)
                   else base64.b64encode(AUDIO[clip]).decode(), model="whatever", encoding_format=form)
        h["Content-Type"] = "application/json"
        st, _, body = request(srv, "POST", "/v1/audio/embeddings", json.dumps(doc).encode(), h)
    doc = json.loads(body)
    if st != 200:
        return st, doc
    check(doc["object"] == "list" and "usage" in doc and "model" in doc, f"not OpenAI's shape: {str(doc)[:200]}")
    out = []
    for i, d in enumerate(doc["data"]):
        check(d["object"] == "embedding" and d["index"] == i, "bad data entry")
        half = opts.get("outtype") == "f16"
        if isinstance(d["embedding"], str):
            raw = base64.b64decode(d["embedding"])
        else:
            raw = struct.pack(f"<{len(d['embedding'])}{'e' if half else 'f'}", *d["embedding"])
        out.append((d["shape"], raw))
    return st, out


def same_as_main(srv_model, clip, opts, got, form):
    shape, data, whole = reference(srv_model, clip, opts)
    if form == "npy":
        return got[1] == whole
    return got[0] == shape and got[1] == data


# ---- Whisper model: endpoints and forms --------------------------------------------------

srv = Server(MICRO, "-b", "8", "--max-body-mb", "4", "--timeout", "5", "--http-threads", "80")
st, _, body = request(srv, "GET", "/health")
check(st == 200 and json.loads(body)["status"] == "ok", f"/health: {st} {body}")
st, _, body = request(srv, "GET", "/v1/models")
meta = json.loads(body)["data"][0]["meta"]
check(st == 200 and meta["n_state"] == 128 and meta["n_mels"] == 80 and meta["backend"] == "cpu", f"/v1/models: {body}")
ok("/health is ok once loaded; /v1/models gives the hyperparameters, backend and dtype")

for clip, opts, form in (("d", {}, "npy"), ("a", {}, "float"), ("b", {"pool": "mean"}, "base64"), ("s", {}, "npy"),
                         ("d", {"no_pad": True}, "float"), ("b", {"layer": 0}, "multipart"),
                         ("a", {"outtype": "f16"}, "base64"), ("d", {"outtype": "f16"}, "float"),
                         ("b", {"final_ln": False}, "npy"), ("d", {"pool": "mean", "no_pad": True}, "float")):
    st, got = embed(srv, clip, opts, form)
    check(st == 200, f"{clip} {opts} {form}: {st} {got}")
    check(all(same_as_main(MICRO, clip, opts, g, form) for g in got), f"{clip} {opts} {form}: differs from main")
ok("raw, multipart and JSON bodies; .npy, float and base64 answers; every option: main's bytes")

st, got = embed(srv, ["a", "d", "b"], {}, "base64")
check(st == 200 and len(got) == 3 and all(same_as_main(MICRO, c, {}, g, "base64") for c, g in zip("adb", got)),
      "a JSON input list")
ok("a JSON list of three inputs gives one data entry each, in order")

if shutil.which("curl"):
    out = os.path.join(TMP, "curl.npy")
    r = subprocess.run(["curl", "-sS", "--max-time", "60", "--data-binary", "@" + CLIPS["d"], "-H", "Accept: application/x-npy",
                        "-o", out, "-w", "%{http_code}", f"http://127.0.0.1:{srv.port}/v1/audio/embeddings"],
                       capture_output=True, text=True)
    check(r.stdout == "200" and open(out, "rb").read() == reference(MICRO, "d", {})[2], f"curl --data-binary: {r.stdout} {r.stderr}")
    r = subprocess.run(["curl", "-sS", "--max-time", "60", "-F", "file=@" + CLIPS["b"], "-F", "pool=mean",
                        f"http://127.0.0.1:{srv.port}/v1/audio/embeddings"], capture_output=True, text=True)
    d = json.loads(r.stdout)["data"][0]
    check(struct.pack(f"<{len(d['embedding'])}f", *d["embedding"]) == reference(MICRO, "b", {"pool": "mean"})[1], "curl -F")
    ok("curl --data-binary (form-urlencoded, 1.3 MB: the 8 KB trap) and curl -F file=: main's bytes")
else:
    print("test-server: note: curl not installed: its checks skipped")

# ---- 64 concurrent clients, mixed clips, options and forms -------------------------------

rng = random.Random(24)
jobs = [(rng.choice("abds"), rng.choice(list(OPTIONS)), rng.choice(["npy", "float", "base64", "multipart"])) for _ in range(64)]
for clip, o, _ in jobs:
    reference(MICRO, clip, OPTIONS[o])
before = request(srv, "GET", "/metrics")[2].decode()


def one(job):
    clip, o, form = job
    st, got = embed(srv, clip, OPTIONS[o], form)
    return st == 200 and all(same_as_main(MICRO, clip, OPTIONS[o], g, form) for g in got)


t0 = time.monotonic()
with ThreadPoolExecutor(64) as ex:
    results = list(ex.map(one, jobs))
dt = time.monotonic() - t0
check(all(results), f"{results.count(False)} of 64 concurrent requests got wrong rows")
metrics = request(srv, "GET", "/metrics")[2].decode()


def metric(text, name):
    return float(re.search(rf"^{name} (\S+)$", text, re.M).group(1))


batches = metric(metrics, "whisper_audio_batches_total") - metric(before, "whisper_audio_batches_total")
windows = metric(metrics, "whisper_audio_windows_total") - metric(before, "whisper_audio_windows_total")
check(batches < 64 and windows > batches, f"64 concurrent requests ran {windows:.0f} windows in {batches:.0f} batches: "
      "no batching across requests")
ok(f"64 concurrent clients (mixed clips, options, forms) each got main's rows: {64 / dt:.1f} requests/s, "
   f"{windows / dt:.1f} windows/s in {batches:.0f} batches")

# ---- hostile and bad requests: a 4xx with a message, and the server stays up ------------

rnd = bytes(random.Random(1).randrange(256) for _ in range(5000))
bad = [
    ("random bytes", AUDIO["a"][:0] + rnd, {}, 400),
    ("a WAV cut inside its header", AUDIO["a"][:30], {}, 400),
    ("an empty body", b"", {}, 400),
    ("bad JSON", b'{"input": ', {"Content-Type": "application/json"}, 400),
    ("deep JSON", b"[" * 10000, {"Content-Type": "application/json"}, 400),
    ("JSON without input", b'{"model": "x"}', {"Content-Type": "application/json"}, 400),
    ("base64 that is not base64", b'{"input": "!!not base64!!"}', {"Content-Type": "application/json"}, 400),
    ("base64 of random bytes", json.dumps({"input": base64.b64encode(rnd).decode()}).encode(), {"Content-Type": "application/json"}, 400),
    ("an unknown option", json.dumps({"input": base64.b64encode(AUDIO["a"]).decode(), "colour": "red"}).encode(),
     {"Content-Type": "application/json"}, 400),
    ("a layer past the model's", AUDIO["a"], {"path": "?layer=7"}, 400),
    ("projector false on a Whisper model", AUDIO["a"], {"path": "?projector=false"}, 400),
    ("a bad encoding_format", AUDIO["a"], {"path": "?encoding_format=hex"}, 400),
    ("a multipart without the file", b'------x\r\nContent-Disposition: form-data; name="pool"\r\n\r\nmean\r\n------x--\r\n',
     {"Content-Type": "multipart/form-data; boundary=----x"}, 400),
    (".npy for two inputs", json.dumps({"input": [base64.b64encode(AUDIO["a"]).decode()] * 2}).encode(),
     {"Content-Type": "application/json", "Accept": "application/x-npy"}, 400),
]
for what, body, h, want in bad:
    path = "/v1/audio/embeddings" + h.pop("path", "")
    try:
        st, hdr, resp = request(srv, "POST", path, body, h)
    except (BrokenPipeError, ConnectionResetError):
        fail(f"{what}: the connection broke before an answer")
    doc = json.loads(resp)
    check(st == want and doc["error"]["code"] == want and doc["error"]["message"], f"{what}: {st} {resp[:300]}")
st, _, resp = request(srv, "GET", "/nowhere")
check(st == 404 and "no such endpoint" in json.loads(resp)["error"]["message"], "404")
ok(f"{len(bad)} bad requests (random, truncated, empty, bad JSON/base64, no file, over the limit, ...): "
   "each its 4xx with a JSON message; an unknown path 404")



def raw_exchange(head, chunks):
    """Sends head, then the chunks while no answer has come; returns the answer's first bytes."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    answer = b""
    try:
        s.sendall(head)
        for c in chunks:
            s.setblocking(False)
            try:
                answer += s.recv(4096)
            except BlockingIOError:
                pass
            s.setblocking(True)
            if answer:
                break
            s.sendall(c)
        s.settimeout(10)
        while len(answer) < 12:
            more = s.recv(4096)
            if not more:
                break
            answer += more
    except (BrokenPipeError, ConnectionResetError):
        # the server answered and closed while a chunk was still going out: the send fails, but
        # the answer that came before the reset is still queued here (Linux keeps it readable)
        try:
            s.settimeout(2)
            answer += s.recv(4096)
        except OSError:
            pass
    s.close()
    return answer


# over --max-body-mb: a declared length, and a chunked body that only grows too long as it comes
big = (4 << 20) + 1
answer = raw_exchange(b"POST /v1/audio/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % big, [b"R" * 65536] * 2)
check(answer.startswith(b"HTTP/1.1 413"), f"a body over --max-body-mb: {answer[:100]}")
chunk = b"%x\r\n" % 65536 + b"R" * 65536 + b"\r\n"
answer = raw_exchange(b"POST /v1/audio/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", [chunk] * 200)
check(answer.startswith(b"HTTP/1.1 413"), f"a chunked body over --max-body-mb: {answer[:100]}")
ok("bodies over --max-body-mb (declared, and chunked without a length): 413")

# a declared size past the limit is refused before the body comes
s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
s.sendall(b"POST /v1/audio/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n")
answer = s.recv(4096)
s.close()
check(answer.startswith(b"HTTP/1.1 413"), f"a huge Content-Length: {answer[:100]}")
ok("a declared Content-Length of 1 TB: 413 at once")

# slowloris: a client that trickles its headers is dropped after --timeout; others are served meanwhile
s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
s.sendall(b"POST /v1/audio/embeddings HTTP/1.1\r\nHost: x\r\n")
t0 = time.monotonic()
st, got = embed(srv, "a", {}, "npy")
check(st == 200 and same_as_main(MICRO, "a", {}, got[0], "npy"), "a request while a slow client holds a connection")
try:
    while s.recv(4096):
        pass
except (ConnectionResetError, socket.timeout):
    pass
waited = time.monotonic() - t0
s.close()
check(waited < 15, f"a slow client held its connection {waited:.1f} s (--timeout 5)")
# a body trickled byte by byte is cut off by the whole-body deadline (--timeout), not per read
s = socket.create_connection(("127.0.0.1", srv.port), timeout=20)
s.sendall(b"POST /v1/audio/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
t0 = time.monotonic()
answer = b""
try:
    for _ in range(64):
        s.sendall(b"R")
        time.sleep(0.25)
        s.setblocking(False)
        try:
            answer += s.recv(4096)
        except BlockingIOError:
            pass
        s.setblocking(True)
        if answer:
            break
except (BrokenPipeError, ConnectionResetError):
    pass
s.close()
check(answer.startswith(b"HTTP/1.1 408") or answer == b"", f"a trickled body: {answer[:100]}")
check(time.monotonic() - t0 < 12, "a trickled body was not cut off (--timeout 5)")
check(request(srv, "GET", "/health")[0] == 200, "the server is down after the hostile requests")
ok(f"slow clients (headers, then a body a byte at a time) are dropped within --timeout; the server stays up")

# a client that disconnects while its windows wait: they are released (not encoded), and the
# server goes on; one window a batch (-b 1), 20 windows of audio, the client gone once it has sent them
gone = Server(MICRO, "-b", "1", "--max-body-mb", "32")
long_wav = os.path.join(TMP, "long.wav")
write_wav(long_wav, (SPEECH * (2 * 16000 * 600 // len(SPEECH) + 1))[:2 * 16000 * 600])
body = open(long_wav, "rb").read()
s = socket.create_connection(("127.0.0.1", gone.port), timeout=10)
s.sendall(b"POST /v1/audio/embeddings HTTP/1.1\r\nHost: x\r\nAccept: application/x-npy\r\n"
          b"Content-Length: %d\r\n\r\n" % len(body) + body)
s.close()                           # gone as soon as the body is sent
t_end = time.monotonic() + 30
while time.monotonic() < t_end:
    text = request(gone, "GET", "/metrics")[2].decode()
    if metric(text, "whisper_audio_requests_cancelled_total") == 1 and metric(text, "whisper_audio_requests_in_flight") == 0:
        break
    time.sleep(0.1)
time.sleep(0.5)                     # windows already in a batch finish; none more may start
text = request(gone, "GET", "/metrics")[2].decode()
check(metric(text, "whisper_audio_requests_cancelled_total") == 1, f"a client gone: not cancelled: {text[:400]}")
encoded = metric(text, "whisper_audio_windows_total")
check(encoded < 15, f"a client gone once its body was sent: {encoded:.0f} of its 20 windows encoded (-b 1)")
st, got = embed(gone, "b", {}, "npy")
check(st == 200 and same_as_main(MICRO, "b", {}, got[0], "npy"), "a request after a client left")
gone.proc.send_signal(signal.SIGTERM)
check(gone.proc.wait(timeout=30) == 0, "the server for the gone client: exit 0 on SIGTERM")
ok(f"a client gone once its 20-window request was sent: cancelled, {encoded:.0f} windows encoded, the next request answered")

# ---- graceful shutdown with requests in flight --------------------------------------------

reference(MICRO, "d", {})
with ThreadPoolExecutor(8) as ex:
    futs = [ex.submit(one, ("d", "", "base64")) for _ in range(8)]
    time.sleep(0.1)
    srv.proc.send_signal(signal.SIGTERM)
    results = [f.result() for f in futs]
try:
    rc = srv.proc.wait(timeout=30)
except subprocess.TimeoutExpired:
    fail("the server did not exit within 30 s of SIGTERM")
check(all(results), f"requests in flight at SIGTERM: {results}")
check(rc == 0, f"the server exited {rc} after SIGTERM")
check("finishing the requests in flight" in open(srv.log_path).read(), "no shutdown message in the log")
ok("SIGTERM with 8 requests in flight: all answered with main's rows, then exit 0")

# ---- an audio-LLM tower, behind --api-key -------------------------------------------------

srv = Server(TOWER, "--api-key", "sesame")
key = {"Authorization": "Bearer sesame"}
check(request(srv, "GET", "/health")[0] == 200, "/health needs no key")
for h in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "sesame"}):
    st, hdr, body = request(srv, "POST", "/v1/audio/embeddings", AUDIO["a"], h)
    check(st == 401 and json.loads(body)["error"]["type"] == "authentication_error", f"auth {h}: {st}")
check(request(srv, "GET", "/metrics")[0] == 401, "/metrics without the key")
check(request(srv, "GET", "/metrics", headers=key)[0] == 200, "/metrics with the key")
ok("--api-key: 401 without it, with a wrong one and without 'Bearer'; /health open")

for clip, opts, form in (("a", {}, "npy"), ("d", {}, "float"), ("b", {"projector": False}, "base64"),
                         ("s", {}, "multipart"), ("b", {"no_pad": True}, "npy")):
    st, got = embed(srv, clip, opts, form, headers=key)
    check(st == 200, f"tower {clip} {opts}: {st} {got}")
    check(all(same_as_main(TOWER, clip, opts, g, form) for g in got), f"tower {clip} {opts} {form}: differs from main")
with ThreadPoolExecutor(16) as ex:
    results = list(ex.map(lambda c: (lambda st_got: st_got[0] == 200 and same_as_main(TOWER, c, {}, st_got[1][0], "base64"))(
        embed(srv, c, {}, "base64", headers=key)), ["a", "b", "d", "s"] * 4))
check(all(results), "concurrent tower requests")
ok("Qwen2-Audio tower: tokens ([n_tokens, llm_dim]), the tower's rows and the encoder's: main's bytes, 16 at once too")

srv.proc.send_signal(signal.SIGINT)
check(srv.proc.wait(timeout=30) == 0, "SIGINT: exit 0")
ok("SIGINT: exit 0")
shutil.rmtree(TMP, ignore_errors=True)
print(f"test-server: all {PASSED} checks passed in {300 - (DEADLINE - time.monotonic()):.1f} s")
