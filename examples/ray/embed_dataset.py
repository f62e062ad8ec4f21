#!/usr/bin/env python3
"""Whisper encoder embeddings of a whole dataset with Ray Data: a directory or a list of audio
files in, .npy shards and a manifest out; resumable.

    python3 examples/ray/embed_dataset.py -m base.gguf -i LibriSpeech/ -o emb/ --pool mean
    python3 examples/ray/embed_dataset.py -m base.gguf --list files.txt -o emb/ --address auto

Each Ray actor holds one whisper_audio.Model: one actor per GPU when the cluster has GPUs,
else CPU actors of --threads threads each. An actor takes --files-per-shard files at a time,
encodes them in shared batches (Model.encode on the list: main's results, bit for bit on the
CPU) and writes one shard: OUT/shards/<id>.npy, the files' rows one after another (as main
writes several -f into one .npy), and OUT/shards/<id>.json, which says which rows are whose.
The .json is written last, so a shard without one is an interrupted one and is not counted.
At the end OUT/manifest.jsonl lists every file: shard, first_row, rows, duration, model,
settings (or the error that stopped it). A second run with the same model and settings skips
the files already done: after a crash, run the same command again.
"""
import argparse
import json
import os
import sys
import uuid

import numpy as np

AUDIO_EXTENSIONS = (".wav", ".flac", ".oga", ".ogg", ".opus", ".mp3")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--model", required=True, help="model: .gguf, ggml-*.bin or a CTranslate2 directory")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("-i", "--input", help="a directory: every audio file below it (%s)" % " ".join(AUDIO_EXTENSIONS))
    src.add_argument("--list", help="a file with one audio path per line ('#' comments)")
    p.add_argument("-o", "--output", required=True, help="output directory (shards/, manifest.jsonl)")
    p.add_argument("--layer", type=int, default=None, help="the hidden state after layer N")
    p.add_argument("--no-final-ln", action="store_true", help="the last layer before the final LayerNorm")
    p.add_argument("--pool", choices=["mean"], default=None, help="one vector per 30 s window")
    p.add_argument("--no-pad", action="store_true", help="the last window unpadded: a row per position")
    p.add_argument("--outtype", choices=["f32", "f16"], default="f32")
    p.add_argument("--files-per-shard", type=int, default=32, help="files per actor call and per shard")
    p.add_argument("--actors", type=int, default=0, help="actors (default: one per GPU, or CPUs / --threads)")
    p.add_argument("--threads", type=int, default=4, help="CPU threads per actor on a cluster without GPUs")
    p.add_argument("--batch", type=int, default=8, help="30 s windows per encoder run (main's -b)")
    p.add_argument("--address", default=None, help="the Ray cluster (ray.init's address; 'auto': the local node's)")
    return p.parse_args(argv)


def list_inputs(args):
    """Absolute paths of the audio files, sorted: every node must see them at those paths."""
    if args.list:
        with open(args.list) as f:
            names = [line.strip() for line in f]
        return [os.path.abspath(n) for n in names if n and not n.startswith("#")]
    if not os.path.isdir(args.input):
        sys.exit(f"error: --input '{args.input}' is not a directory")
    files = []
    for root, _, names in os.walk(args.input):
        files += [os.path.join(root, n) for n in names if n.lower().endswith(AUDIO_EXTENSIONS)]
    return sorted(os.path.abspath(f) for f in files)


def settings_of(args):
    return {"layer": args.layer, "final_ln": not args.no_final_ln, "pool": args.pool, "no_pad": args.no_pad,
            "outtype": args.outtype}


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


class Embedder:
    """A Ray actor: one Model, kept for all its calls; a call is a batch of files -> one shard."""

    def __init__(self, model_path, device, n_threads, batch, settings, shard_dir, model_info):
        import whisper_audio
        self.wa = whisper_audio
        self.model = whisper_audio.Model(model_path, device=device, n_threads=n_threads, batch=batch)
        self.settings, self.shard_dir, self.model_info = settings, shard_dir, model_info

    def __call__(self, batch):
        files = [str(f) for f in batch["file"]]
        entries, pcms = [], []
        for f in files:                 # a file that cannot be read is reported, the others go on
            try:
                pcm = self.wa.load_audio(f)
                if pcm.size == 0:
                    raise ValueError(f"{f}: no audio samples")
            except (self.wa.WhisperAudioError, ValueError) as e:
                entries.append({"file": f, "error": str(e)})
                continue
            pcms.append(pcm)
            entries.append({"file": f, "duration": pcm.size / self.wa.SAMPLE_RATE})
        ok = [e for e in entries if "error" not in e]
        shard = uuid.uuid4().hex[:16]
        if pcms:
            s = self.settings
            embs = self.model.encode(pcms, layer=s["layer"], final_ln=s["final_ln"], pool=s["pool"],
                                     no_pad=s["no_pad"], outtype=s["outtype"])
            row = 0
            for e, emb in zip(ok, embs):
                e.update(shard=shard, first_row=row, rows=int(emb.shape[0]))
                row += emb.shape[0]
            write_atomic(os.path.join(self.shard_dir, shard + ".npy"), lambda f: np.save(f, np.concatenate(embs)))
        record = {"shard": shard, "model": self.model_info, "settings": self.settings, "files": entries}
        write_atomic(os.path.join(self.shard_dir, shard + ".json"), lambda f: json.dump(record, f))
        return {"file": np.array(files), "error": np.array([e.get("error", "") for e in entries])}


def read_shards(shard_dir, model_info, settings):
    """Per file done: its manifest entry; refuses shards made with another model or settings."""
    done = {}
    for name in sorted(os.listdir(shard_dir)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(shard_dir, name)) as f:
            record = json.load(f)
        if record["model"] != model_info or record["settings"] != settings:
            sys.exit(f"error: {shard_dir} holds shards of another model or settings ({name}: {record['model']}, "
                     f"{record['settings']}); give another --output")
        for e in record["files"]:
            if "error" not in e:
                done[e["file"]] = dict(e, model=record["model"], settings=record["settings"])
    return done


def actor_threads(requested, nodes):
    """The CPU threads of one actor: --threads, at most the CPUs of the largest live node (an
    actor runs on one node; Ray would wait forever for an actor that no node can hold)."""
    largest = max([int(n.get("Resources", {}).get("CPU", 0)) for n in nodes if n.get("Alive", True)] or [0])
    if largest < 1:
        sys.exit("error: the Ray cluster has no node with a CPU for an actor")
    if requested > largest:
        print(f"embed_dataset: --threads {requested}: the largest node has {largest} CPUs; using {largest}", flush=True)
    return min(requested, largest)


def main(argv=None):
    args = parse_args(argv)
    import ray
    import whisper_audio

    files = list_inputs(args)
    settings = settings_of(args)
    shard_dir = os.path.join(args.output, "shards")
    os.makedirs(shard_dir, exist_ok=True)
    with whisper_audio.Model(args.model, device="cpu", n_threads=1) as m:   # checks the model and the options
        model_info = dict(m.hparams, path=os.path.abspath(args.model))
        if args.layer is not None and not 0 <= args.layer < m.n_layer:
            sys.exit(f"error: --layer {args.layer}: the model has layers 0 to {m.n_layer - 1}")
    done = read_shards(shard_dir, model_info, settings)
    todo = [f for f in files if f not in done]
    print(f"embed_dataset: {len(files)} files, {len(files) - len(todo)} done before, {len(todo)} to do", flush=True)

    errors = {}
    if todo:
        if not ray.is_initialized():
            ray.init(address=args.address)
        n_gpus = int(ray.cluster_resources().get("GPU", 0))
        if n_gpus > 0:      # one actor per GPU, each holding one GPU
            device, n_threads, resources = "cuda", 1, {"num_gpus": 1}
            n_actors = args.actors or n_gpus
        else:
            device, n_threads = "cpu", actor_threads(args.threads, ray.nodes())
            resources = {"num_cpus": n_threads}
            n_actors = args.actors or max(1, int(ray.cluster_resources().get("CPU", 1)) // n_threads)
        n_actors = min(n_actors, -(-len(todo) // args.files_per_shard))
        print(f"embed_dataset: {n_actors} {device} actor(s)", flush=True)
        ds = ray.data.from_items([{"file": f} for f in todo])
        ds = ds.map_batches(Embedder, batch_size=args.files_per_shard, batch_format="numpy",
                            compute=ray.data.ActorPoolStrategy(size=n_actors),
                            fn_constructor_kwargs={"model_path": os.path.abspath(args.model), "device": device,
                                                   "n_threads": n_threads, "batch": args.batch, "settings": settings,
                                                   "shard_dir": os.path.abspath(shard_dir), "model_info": model_info},
                            **resources)
        for row in ds.iter_rows():
            if row["error"]:
                errors[str(row["file"])] = str(row["error"])
                print(f"embed_dataset: error: {row['error']}", flush=True)
        done = read_shards(shard_dir, model_info, settings)

    # the manifest: every input, in order, done or with its error
    def write_manifest(f):
        for path in files:
            entry = done.get(path) or {"file": path, "error": errors.get(path, "not done"), "model": model_info,
                                       "settings": settings}
            f.write(json.dumps(entry) + "\n")
    write_atomic(os.path.join(args.output, "manifest.jsonl"), write_manifest)
    print(f"embed_dataset: {len(done)} of {len(files)} files done; {len(errors)} failed; "
          f"manifest {os.path.join(args.output, 'manifest.jsonl')}", flush=True)
    return {"files": len(files), "done": len(done), "encoded": len(todo) - len(errors), "errors": errors}


if __name__ == "__main__":
    sys.exit(1 if main()["errors"] else 0)
