#!/usr/bin/env python3
"""Whisper encoder embeddings of a whole dataset with Ray Data: a directory or a list of audio
files in, Parquet (or .npy shards) and a manifest out; resumable.

    python3 examples/ray/embed_dataset.py -m base.gguf -i LibriSpeech/ -o emb/ --pool mean
    python3 examples/ray/embed_dataset.py -m base.gguf --list files.txt -o emb/ --address auto

Each Ray actor holds one whisper_audio.Model: one actor per GPU when the cluster has GPUs
(--actors N: N actors sharing them), else CPU actors of --threads threads each. An actor takes
--files-per-shard files at a time and encodes them in shared batches (Model.encode on the list:
main's rows, bit for bit on the CPU).

--format parquet (the default): each actor call writes OUT/parquet/<id>.parquet with one row per
30 s window (an audio LLM's chunk): the columns of parquet_schema below; written by the actor
itself, whole or not at all (a temporary renamed into place), so that its rows go to the disk
once, with no write task to start and no copy through Ray's object store. --format npy: each
actor call writes OUT/shards/<id>.npy, the files' rows one after another (as main writes several
-f into one .npy), and OUT/shards/<id>.json, which says which rows are whose (written last: a
shard without one is an interrupted one, done again). Either way a call returns each file's
error, if any, to the driver.

OUT/manifest.json holds, once, the model (the sha256 of the files its loader reads), the
settings, the library's version and the format; then every input, done (its windows and where
they are) or the error that stopped it. It is written before any work and again at the end. A
second run into the same OUT skips the inputs already done (after a crash: run the same command
again); a run with another model, settings, library version or format is refused.
"""
import argparse
import hashlib
import json
import math
import os
import sys
import threading
import uuid

import numpy as np

AUDIO_EXTENSIONS = (".wav", ".flac", ".oga", ".ogg", ".opus", ".mp3")
DEFAULT_THREADS = 4         # CPU threads per actor at most, unless --threads says otherwise
CONCURRENT_CALLS = 2        # calls an actor runs at once (Embedder)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--model", required=True, help="model: any that main's -m takes (a .gguf, ggml-*.bin, a "
                   "CTranslate2 or Hugging Face directory, a repo id from the Hugging Face cache)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-i", "--input", help="a directory: every audio file below it (%s)" % " ".join(AUDIO_EXTENSIONS))
    src.add_argument("--list", help="a file with one audio path per line ('#' comments)")
    p.add_argument("-o", "--output", required=True, help="output directory (parquet/ or shards/, manifest.json)")
    p.add_argument("--format", choices=["parquet", "npy"], default="parquet", help="Parquet files or .npy shards")
    p.add_argument("--layer", type=int, default=None, help="the hidden state after layer N")
    p.add_argument("--no-final-ln", action="store_true", help="the last layer before the final LayerNorm")
    p.add_argument("--pool", choices=["mean"], default=None, help="one vector per 30 s window")
    p.add_argument("--no-pad", action="store_true", help="the last window unpadded: a row per position")
    p.add_argument("--outtype", choices=["f32", "f16"], default="f32")
    p.add_argument("--dtype", choices=["f16", "bf16", "fp8"], default="f16",
                   help="the GPU actors' compute type (main's --dtype; the CPU computes in f32)")
    p.add_argument("--files-per-shard", type=int, default=32, help="files per actor call (a shard, a Parquet file)")
    p.add_argument("--actors", type=int, default=0,
                   help="actors (default: one per GPU; without GPUs as many as the CPUs hold at --threads each)")
    p.add_argument("--threads", type=int, default=None,
                   help=f"CPU threads per actor on a cluster without GPUs (default: {DEFAULT_THREADS}, or fewer where "
                        "that puts more of the cluster's CPUs to work)")
    p.add_argument("--batch", type=int, default=8, help="30 s windows per encoder run (main's -b)")
    p.add_argument("--address", default=None, help="the Ray cluster (ray.init's address; 'auto': the local node's)")
    args = p.parse_args(argv)
    for name in ("files_per_shard", "batch", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.actors < 0:
        p.error("--actors must be at least 1 (0: the default)")
    return args


def list_inputs(args):
    """[(absolute path, id)] of the audio files, sorted, each path once: every node must see them at
    those paths. id: the path below --input, or the line of --list as written."""
    if args.list:
        with open(args.list) as f:
            names = [line.strip() for line in f]
        pairs = [(os.path.abspath(n), n) for n in names if n and not n.startswith("#")]
    else:
        if not os.path.isdir(args.input):
            sys.exit(f"error: --input '{args.input}' is not a directory")
        root, pairs = os.path.abspath(args.input), []
        for d, _, names in os.walk(root):
            pairs += [(os.path.join(d, n), os.path.relpath(os.path.join(d, n), root))
                      for n in names if n.lower().endswith(AUDIO_EXTENSIONS)]
        pairs.sort()
    seen, out = set(), []
    for path, name in pairs:        # a file listed twice is done once (its rows would be there twice)
        if path in seen:
            print(f"embed_dataset: {name}: listed again; done once", flush=True)
            continue
        seen.add(path)
        out.append((path, name))
    return out


def settings_of(args):
    return {"layer": args.layer, "final_ln": not args.no_final_ln, "pool": args.pool, "no_pad": args.no_pad,
            "outtype": args.outtype, "dtype": args.dtype}


def identity_cache():
    """Where model identities are kept between runs: $XDG_CACHE_HOME (~/.cache)/whisper-audio/, never
    beside a model (a model's folder may be read-only or shared)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "whisper-audio", "model-identity.json")


def identity_key(whisper_audio, path):
    """What a model's identity depends on: every file under the path (links followed, as the loader
    reads the Hugging Face cache's snapshots) by name, size, mtime, inode and device, and the
    library that writes the GGUF. A file that changes in any of these gives a new key, so a kept
    identity is never stale. None for a repo id (the library finds its folder)."""
    if not os.path.exists(path):
        return None
    files = [path] if not os.path.isdir(path) else sorted(
        os.path.join(d, f) for d, _, names in os.walk(path, followlinks=True) for f in names)
    lib = os.environ.get("WHISPER_AUDIO_LIBRARY") or os.path.join(os.path.dirname(whisper_audio.__file__), "libwhisper-audio.so")
    stats = []
    for f in files + [lib]:
        st = os.stat(f)
        stats.append([os.path.realpath(f), st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev])
    blob = json.dumps([whisper_audio.version(), stats]).encode()
    return hashlib.sha256(blob).hexdigest()


def model_identity(whisper_audio, path, out_dir, cache=None):
    """The model by content, through the package's loader (so any -m that main takes: our GGUF,
    ggml-*.bin, CTranslate2 and Hugging Face directories, a repo id from the Hugging Face cache):
    the sha256 of the GGUF the library writes of it (main --save-gguf: the matrices as loaded),
    written beside the manifest and removed. Its hyperparameters are the loader's. Kept in the
    cache file under identity_key, so that a second run of the same files skips the load, the
    write and the hash (seconds for large-v3)."""
    cache = cache or identity_cache()
    key = identity_key(whisper_audio, path)
    kept = {}
    try:
        with open(cache) as f:
            kept = json.load(f)
        if key and isinstance(kept.get(key), dict) and kept[key].get("path") == path:
            return kept[key]
    except (OSError, ValueError):
        kept = {}
    identity = hash_model(whisper_audio, path, out_dir)
    if key:
        try:                            # a cache that cannot be written costs the next run the hash, nothing else
            os.makedirs(os.path.dirname(cache), exist_ok=True)
            kept = {k: v for k, v in kept.items() if isinstance(v, dict)}
            kept[key] = identity
            while len(kept) > 64:       # the oldest first out
                kept.pop(next(iter(kept)))
            write_atomic(cache, lambda f: json.dump(kept, f))
        except OSError:
            pass
    return identity


def hash_model(whisper_audio, path, out_dir):
    """model_identity's work: load, write the GGUF, hash it."""
    tmp = os.path.join(out_dir, f".model-{uuid.uuid4().hex[:8]}.gguf")
    try:
        with whisper_audio.Model(path, device="cpu", n_threads=1) as model:
            hparams = model.hparams
            model.save_gguf(tmp)
        h, total = hashlib.sha256(), 0
        with open(tmp, "rb") as f:
            while block := f.read(1 << 24):
                h.update(block)
                total += len(block)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return {"sha256": h.hexdigest(), "of": "its GGUF as the library writes it (main --save-gguf)", "bytes": total,
            "path": path, "hparams": hparams}


def write_atomic(path, write):
    """write(file) to a temporary beside path, then rename it into place: the file is whole or absent."""
    tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        with open(tmp, "w" if path.endswith((".json", ".jsonl")) else "wb") as f:
            write(f)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# ---- the Parquet rows -------------------------------------------------------------------

def parquet_schema(d, outtype, pooled):
    """One row per window (an audio LLM's chunk). embedding: pooled, a fixed-size list of d
    values; else a list of fixed-size lists of d, one per row of the window (1500; a --no-pad
    window's positions; a chunk's tokens), which holds windows of any length in one column.
    f16 rows are IEEE half floats (Arrow's halffloat, Parquet's FLOAT16)."""
    import pyarrow as pa
    row = pa.list_(pa.float16() if outtype == "f16" else pa.float32(), d)
    return pa.schema([
        ("id", pa.string()),            # the path below --input, or the --list line
        ("path", pa.string()),          # absolute
        ("duration", pa.float64()),     # of the input, seconds (its 16 kHz samples / 16000)
        ("window_index", pa.int32()),   # 0-based, within the input ("window" is a reserved word in SQL)
        ("windows", pa.int32()),        # the input's windows
        ("samples", pa.int64()),        # 16 kHz samples of audio in the window (the rest is padding)
        ("positions", pa.int32()),      # encoder positions that hold audio
        ("embedding", row if pooled else pa.list_(row)),
        ("model_sha256", pa.string()),  # the settings: manifest.json's, on every row
        ("layer", pa.int32()), ("final_ln", pa.bool_()), ("pool", pa.string()), ("no_pad", pa.bool_()),
        ("outtype", pa.string()),
        ("compute", pa.string()),       # where the row was computed: "cpu" (f32), or the GPU and --dtype
    ])


def parquet_table(schema, inputs, results, settings, sha256, compute):
    """The rows of one actor call: inputs [(path, id, duration)], results [(rows, windows)] of
    Model.encode(..., return_windows=True)."""
    import pyarrow as pa
    cols = {name: [] for name in ("id", "path", "duration", "window_index", "windows", "samples", "positions")}
    values, lengths = [], []
    emb_type = schema.field("embedding").type
    pooled = pa.types.is_fixed_size_list(emb_type)
    d = emb_type.list_size if pooled else emb_type.value_type.list_size
    for (path, name, duration), (rows, w) in zip(inputs, results):
        n = len(w["window"])
        cols["id"] += [name] * n
        cols["path"] += [path] * n
        cols["duration"] += [duration] * n
        cols["window_index"] += w["window"].tolist()
        cols["windows"] += [n] * n
        cols["samples"] += w["samples"].tolist()
        cols["positions"] += w["audio_positions"].tolist()
        lengths += w["rows"].tolist()
        values.append(rows.reshape(-1, d))
    n_rows = len(cols["id"])
    dtype = np.float16 if settings["outtype"] == "f16" else np.float32
    flat = np.concatenate(values).reshape(-1) if values else np.empty(0, dtype)
    emb = pa.FixedSizeListArray.from_arrays(pa.array(flat), d)
    if not pooled:
        emb = pa.ListArray.from_arrays(pa.array(np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]), pa.int32()),
                                       emb)
    const = {"model_sha256": sha256, "layer": settings["layer"], "final_ln": settings["final_ln"],
             "pool": settings["pool"], "no_pad": settings["no_pad"], "outtype": settings["outtype"], "compute": compute}
    arrays = [pa.array(cols[f.name], f.type) for f in schema if f.name in cols] + [emb] + \
             [pa.array([const[f.name]] * n_rows, f.type) for f in schema if f.name in const]
    return pa.Table.from_arrays(arrays, schema=schema)


# ---- the actor --------------------------------------------------------------------------

class Embedder:
    """A Ray actor: one Model, kept for all its calls; a call is a batch of files -> a Parquet
    file or an .npy shard, written here, and each file's error (if any) back to the driver. Two
    calls run at once (CONCURRENT_CALLS), their encodes one after the other: while one call
    encodes, the other decodes its files or writes its rows, so the device does not wait for
    that host work between calls."""

    def __init__(self, model_path, device, n_threads, batch, settings, out_dir, fmt, sha256):
        import whisper_audio
        self.wa = whisper_audio
        self.model = whisper_audio.Model(model_path, device=device, dtype=settings["dtype"], n_threads=n_threads,
                                         batch=batch)
        self.settings, self.out_dir, self.fmt, self.sha256 = settings, out_dir, fmt, sha256
        self.encoding = threading.Lock()    # one encode at a time: one encoder, one pipeline
        backend = self.model.backend        # "cpu", or the CUDA device as the library names it
        self.compute = backend if backend == "cpu" else f"{backend} {settings['dtype']}"
        s = settings
        self.options = dict(layer=s["layer"], final_ln=s["final_ln"], pool=s["pool"], no_pad=s["no_pad"],
                            outtype=s["outtype"])
        if fmt == "parquet":            # the width by the library's rule (a tower's tokens are wider)
            self.schema = parquet_schema(self.model.row_width(**self.options), s["outtype"], s["pool"] is not None)

    def __call__(self, batch):
        files, ids = [str(f) for f in batch["file"]], [str(i) for i in batch["id"]]
        entries, pcms = [], []
        for f, name in zip(files, ids):     # a file that cannot be read is reported, the others go on
            try:
                pcm = self.wa.load_audio(f)
                if pcm.size == 0:
                    raise ValueError(f"{f}: no audio samples")
            except (self.wa.WhisperAudioError, ValueError) as e:
                entries.append({"file": f, "id": name, "error": str(e)})
                continue
            pcms.append(pcm)
            entries.append({"file": f, "id": name, "duration": pcm.size / self.wa.SAMPLE_RATE})
        ok = [e for e in entries if "error" not in e]
        failed = [e for e in entries if "error" in e]
        with self.encoding:
            results = self.model.encode(pcms, return_windows=True, **self.options) if pcms else []
        shard = uuid.uuid4().hex[:16]
        status = {"file": np.array(files), "error": np.array([e.get("error", "") for e in entries])}
        if self.fmt == "parquet":
            if results:
                import pyarrow.parquet as pq
                table = parquet_table(self.schema, [(e["file"], e["id"], e["duration"]) for e in ok], results,
                                      self.settings, self.sha256, self.compute)
                write_atomic(os.path.join(self.out_dir, "parquet", shard + ".parquet"), lambda f: pq.write_table(table, f))
            return status
        row = 0
        for e, (emb, windows) in zip(ok, results):
            e.update(shard=shard, first_row=row, rows=int(emb.shape[0]), windows=len(windows["window"]))
            row += emb.shape[0]
        if results:
            write_atomic(os.path.join(self.out_dir, "shards", shard + ".npy"),
                         lambda f: np.save(f, np.concatenate([emb for emb, _ in results])))
        write_atomic(os.path.join(self.out_dir, "shards", shard + ".json"),
                     lambda f: json.dump({"shard": shard, "files": entries}, f))
        return status


# ---- what earlier runs did ----------------------------------------------------------------

def check_manifest(out, header):
    """Refuses an OUT made with another model, settings, library version or format (or by an
    earlier version of this example, whose manifest named the model by path)."""
    path = os.path.join(out, "manifest.json")
    if not os.path.exists(path):
        leftovers = [d for d in ("shards", "parquet") if os.path.isdir(os.path.join(out, d)) and
                     os.listdir(os.path.join(out, d))]
        if leftovers or os.path.exists(os.path.join(out, "manifest.jsonl")):
            sys.exit(f"error: {out} holds {', '.join(leftovers) or 'a manifest.jsonl'} but no manifest.json (an earlier "
                     "version of this example made it); give another --output")
        return
    try:
        with open(path) as f:
            old = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise SystemExit(f"error: {path} is not a whole manifest ({e}: cut short?); "
                         "move it away to start again, or give another --output")
    if not isinstance(old, dict):
        raise SystemExit(f"error: {path} is not this example's manifest; give another --output")
    for what, mine, theirs in (("model (sha256)", header["model"]["sha256"], old.get("model", {}).get("sha256")),
                               ("settings", header["settings"], old.get("settings")),
                               ("library version", header["library_version"], old.get("library_version")),
                               ("format", header["format"], old.get("format"))):
        if mine != theirs:
            sys.exit(f"error: {out} was made with another {what}: {theirs} (this run: {mine}); give another --output")


def read_shards(shard_dir):
    """Per input done: its manifest entry (--format npy). A shard without its .json is not counted."""
    done = {}
    for name in sorted(os.listdir(shard_dir)):
        if name.endswith(".json"):
            with open(os.path.join(shard_dir, name)) as f:
                for e in json.load(f)["files"]:
                    if "error" not in e:
                        done[e["file"]] = e
    return done


def read_parquet(pq_dir):
    """Per input done: {windows, duration, parquet: [files]} (--format parquet). Repairs what an
    interrupted run left: a file that pyarrow cannot read (a write cut short has no footer yet)
    is removed; an input whose windows are not all there exactly once has its rows dropped from
    the files that hold them (rewritten whole, then renamed into place), and is done again."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    seen, where, info = {}, {}, {}
    for name in sorted(n for n in os.listdir(pq_dir) if n.endswith(".parquet")):
        full = os.path.join(pq_dir, name)
        try:
            t = pq.read_table(full, columns=["path", "window_index", "windows", "duration"])
        except (pa.ArrowException, OSError) as e:
            print(f"embed_dataset: {name}: cannot be read ({e}): an interrupted write; removed", flush=True)
            os.remove(full)
            continue
        for path, window, windows, duration in zip(*(t[c].to_pylist() for c in t.column_names)):
            seen.setdefault(path, []).append(window)
            where.setdefault(path, set()).add(name)
            info[path] = (windows, duration)
    done, partial = {}, set()
    for path, windows in seen.items():
        if sorted(windows) == list(range(info[path][0])):
            done[path] = {"windows": info[path][0], "duration": info[path][1], "parquet": sorted(where[path])}
        else:
            partial.add(path)
    for name in sorted(set().union(*(where[p] for p in partial))):
        full = os.path.join(pq_dir, name)
        t = pq.read_table(full)
        keep = t.filter(pc.invert(pc.is_in(t["path"], pa.array(sorted(partial), pa.string()))))
        print(f"embed_dataset: {name}: {t.num_rows - keep.num_rows} rows of inputs not wholly written dropped", flush=True)
        if keep.num_rows:
            write_atomic(full, lambda f: pq.write_table(keep, f))
        else:
            os.remove(full)
    return done


# ---- the actors' resources ------------------------------------------------------------------

def cpu_actors(threads, actors, nodes):
    """(threads per actor, actors) for CPU actors on the live nodes: Ray would wait forever for an
    actor that no node can hold. The actors may hold every CPU: they write their own files, so
    Ray Data has no write task that would wait for one. Default threads: the most, up to
    DEFAULT_THREADS, that put at least 90% as many CPUs to work as the best choice would (15
    CPUs: 5 actors of 3, rather than 3 of 4 with 3 CPUs idle)."""
    cpus = [int(n.get("Resources", {}).get("CPU", 0)) for n in nodes if n.get("Alive", True)]
    cpus = [c for c in cpus if c > 0]
    if not cpus:
        sys.exit("error: the Ray cluster has 0 CPU(s): an actor needs 1")

    def fit(t):                         # actors of t threads the nodes hold
        return sum(c // t for c in cpus)

    largest = max(cpus)
    if threads is None:
        choices = range(1, min(DEFAULT_THREADS, largest) + 1)
        best = max(fit(t) * t for t in choices)
        threads = max(t for t in choices if fit(t) * t >= 0.9 * best)
    elif threads > largest:
        print(f"embed_dataset: --threads {threads}: the largest node has {largest} CPUs; using {largest}", flush=True)
        threads = largest
    n = fit(threads)
    if actors > n:
        print(f"embed_dataset: --actors {actors}: the cluster holds {n} of {threads} threads; using {n}", flush=True)
    return threads, min(actors, n) if actors else n


def gpu_actors(actors, n_gpus, n_cpus):
    """(GPU share per actor, actors): one actor per GPU, or --actors sharing them (k actors on
    each GPU hold 1/k of it each); each actor also takes a CPU."""
    n = actors or n_gpus
    cpus = max(1, int(n_cpus))
    if n > cpus:
        print(f"embed_dataset: --actors {n}: the cluster has {int(n_cpus)} CPUs; using {cpus}", flush=True)
        n = cpus
    return 1.0 / math.ceil(n / n_gpus), n


# ---- the run ----------------------------------------------------------------------------------

def main(argv=None):
    args = parse_args(argv)
    import whisper_audio

    inputs = list_inputs(args)
    ids = dict(inputs)
    settings = settings_of(args)
    # a path as given becomes absolute for the actors; a repo id (the Hugging Face cache) stays as it is
    model_path = os.path.abspath(args.model) if os.path.exists(args.model) else args.model
    os.makedirs(args.output, exist_ok=True)
    try:                                # the loader checks the model (the actors make its encoders)
        identity = model_identity(whisper_audio, model_path, args.output)
    except whisper_audio.WhisperAudioError as e:
        sys.exit(f"error: {e}")
    hparams = identity["hparams"]
    if args.layer is not None and not 0 <= args.layer < hparams["n_layer"]:
        sys.exit(f"error: --layer {args.layer}: the model has layers 0 to {hparams['n_layer'] - 1}")
    header = {"model": identity, "settings": settings,
              "library_version": whisper_audio.version(), "format": args.format}
    check_manifest(args.output, header)
    manifest = os.path.join(args.output, "manifest.json")
    data_dir = os.path.join(args.output, "parquet" if args.format == "parquet" else "shards")
    os.makedirs(data_dir, exist_ok=True)
    write_atomic(manifest, lambda f: json.dump(dict(header, files=None), f))   # files: null while a run is on
    done = read_parquet(data_dir) if args.format == "parquet" else read_shards(data_dir)
    todo = [(path, name) for path, name in inputs if path not in done]
    print(f"embed_dataset: {len(inputs)} files, {len(inputs) - len(todo)} done before, {len(todo)} to do", flush=True)

    errors = {}
    if todo:
        import ray                      # only once there is work: the checks above need no cluster
        if not ray.is_initialized():    # a local instance without the dashboard, a second less to start
            ray.init(address=args.address, **({} if args.address else {"include_dashboard": False}))
        n_gpus = int(ray.cluster_resources().get("GPU", 0))
        if n_gpus > 0:
            share, n_actors = gpu_actors(args.actors, n_gpus, ray.cluster_resources().get("CPU", 0))
            device, n_threads, resources = "cuda", 1, {"num_gpus": share, "num_cpus": 1}
        else:
            n_threads, n_actors = cpu_actors(args.threads, args.actors, ray.nodes())
            device, resources = "cpu", {"num_cpus": n_threads}
        n_actors = min(n_actors, -(-len(todo) // args.files_per_shard))
        print(f"embed_dataset: {n_actors} {device} actor(s)" +
              (f" of {n_threads} threads" if device == "cpu" else f", {share:g} GPU each"), flush=True)
        ds = ray.data.from_items([{"file": path, "id": name} for path, name in todo])
        ds = ds.map_batches(Embedder, batch_size=args.files_per_shard, batch_format="numpy",
                            compute=ray.data.ActorPoolStrategy(size=n_actors, max_concurrent_calls_per_actor=CONCURRENT_CALLS,
                                                               enable_true_multi_threading=True),
                            fn_constructor_kwargs={"model_path": model_path, "device": device,
                                                   "n_threads": n_threads, "batch": args.batch, "settings": settings,
                                                   "out_dir": os.path.abspath(args.output), "fmt": args.format,
                                                   "sha256": header["model"]["sha256"]},
                            **resources)
        for row in ds.iter_rows():      # each file's error, if any; the actors write the rows
            if row["error"]:
                errors[str(row["file"])] = str(row["error"])
        done = read_parquet(data_dir) if args.format == "parquet" else read_shards(data_dir)
        for path, message in errors.items():
            print(f"embed_dataset: error: {message}", flush=True)

    # the manifest: the header once, then every input, in order, done or with its error
    files = [dict({"file": path, "id": ids[path]}, **done[path]) if path in done else
             {"file": path, "id": ids[path], "error": errors.get(path, "not done")} for path, _ in inputs]
    write_atomic(manifest, lambda f: json.dump(dict(header, files=files), f, indent=1))
    n_done = sum("error" not in e for e in files)
    print(f"embed_dataset: {n_done} of {len(inputs)} files done; {len(errors)} failed; manifest {manifest}", flush=True)
    return {"files": len(inputs), "done": n_done, "encoded": len(todo) - len(errors), "errors": errors}


def run(argv=None):
    """main's exit status: 0 every input done, 1 an error stopped the run (one line, no
    traceback: a model that does not load, an OUT that cannot be written, a cut manifest), 2 a
    bad command line, 3 some inputs failed (the others are done)."""
    try:
        return 3 if main(argv)["errors"] else 0
    except OSError as e:                # OUT read-only or full, a file gone: the path and the reason
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("error: interrupted (run the same command again to resume)", file=sys.stderr)
        return 130
    except Exception as e:              # Ray's wrapper of a failure in a task or an actor (a full OUT
        if type(e).__module__.split(".")[0] != "ray":     # while an actor writes): its cause
            raise
        cause = getattr(e, "cause", None) or e
        if isinstance(cause, OSError) and cause.strerror:
            msg = f"{cause.filename}: {cause.strerror}" if cause.filename else cause.strerror
        else:
            msg = (str(cause).strip().splitlines() or [type(cause).__name__])[-1]
        print(f"error: {msg}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(run())
