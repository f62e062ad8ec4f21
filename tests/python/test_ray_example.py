# examples/ray/embed_dataset.py on a local Ray instance that this test starts (2 CPUs, CPU
# actors, the random micro model, a few files). Parquet: every row equals main's (bit for bit,
# f32 and f16), with main's windows and positions (its --json); pyarrow, pandas and duckdb read
# it; a second run does only what is not done yet and repairs what an interrupted one left; the
# manifest names the model by content, and a run with another model or settings is refused.
# .npy shards: main's rows too. The actors never ask Ray for more CPUs than the cluster has.
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ray[data]')")
pa = pytest.importorskip("pyarrow", reason="pyarrow is not installed (pip install 'ray[data]')")
import pyarrow.parquet as pq     # noqa: E402  (after the skip)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")   # Ray's own, about its own settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN = os.path.join(ROOT, os.environ.get("WA_MAIN", "build/main"))
MODEL = os.path.join(ROOT, "build", "micro-80-f32.gguf")
MODEL_F16 = os.path.join(ROOT, "build", "micro-80-f16.gguf")
AUDIO = os.path.join(ROOT, "tests", "data", "audio")

spec = importlib.util.spec_from_file_location("embed_dataset", os.path.join(ROOT, "examples", "ray", "embed_dataset.py"))
embed_dataset = importlib.util.module_from_spec(spec)
spec.loader.exec_module(embed_dataset)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def main_run(tmp_path, paths, *args):
    """main over paths, one .npy each: ({path: rows}, {path: its --json entry})."""
    out = tmp_path / "main"
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([MAIN, "-m", MODEL, "-o", str(out) + "/", "--device", "cpu", "--no-progress", "--json",
                        "--keep-ext"] +
                       list(args) + list(paths), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    files = {os.path.abspath(f["path"]): f for f in doc["files"]}
    return {p: np.load(f["output"]) for p, f in files.items()}, files


def read_manifest(out):
    with open(os.path.join(out, "manifest.json")) as f:
        return json.load(f)


def parquet_rows(out):
    """{path: [rows of window 0, 1, ...]} and the table, read back with pyarrow."""
    t = pq.read_table(os.path.join(out, "parquet")).sort_by([("path", "ascending"), ("window_index", "ascending")])
    emb_type = t.schema.field("embedding").type
    pooled = pa.types.is_fixed_size_list(emb_type)
    d = emb_type.list_size if pooled else emb_type.value_type.list_size
    rows = {}
    for path, emb in zip(t["path"].to_pylist(), t["embedding"]):
        flat = emb.values if pooled else emb.values.flatten()       # a window's d values, or its rows'
        rows.setdefault(path, []).append(flat.to_numpy(zero_copy_only=False).reshape(-1, d))
    return rows, t


def check_against_main(tmp_path, out, paths, *args):
    """Each input's Parquet rows, windows, positions and duration: main's, bit for bit."""
    ref, info = main_run(tmp_path, paths, *args)
    rows, t = parquet_rows(out)
    assert sorted(rows) == sorted(ref)
    for path in paths:
        got = np.concatenate(rows[path]) if "--pool" in args or "--no-pad" in args else np.stack(rows[path])
        assert got.dtype == ref[path].dtype and np.array_equal(got, ref[path]), path
        mine = t.filter(pa.compute.equal(t["path"], path))
        assert mine["window_index"].to_pylist() == list(range(info[path]["windows"]))
        assert mine["windows"].to_pylist() == [info[path]["windows"]] * info[path]["windows"]
        assert mine["positions"].to_pylist() == info[path]["audio_positions"]
        assert abs(mine["duration"][0].as_py() - info[path]["seconds"]) < 1e-3
    return t


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def gguf_sha256(model, tmp_path):
    """The manifest's model hash: that of the GGUF main --save-gguf writes of the model."""
    out = tmp_path / "saved.gguf"
    subprocess.run([MAIN, "-m", model, "--save-gguf", str(out)], check=True, capture_output=True)
    return sha256(out)


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    """The example keeps model identities in $XDG_CACHE_HOME: a folder of the test's, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def test_parquet_equals_main_resumes_and_repairs(tmp_path, local_ray):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ["long_70s_16k.wav", "speech_16k.wav", "speech_44k1_stereo_s16.wav"]:
        shutil.copy(os.path.join(AUDIO, name), data / "sub" / name if name.startswith("long") else data / name)
    (data / "broken.wav").write_text("not audio")
    model = str(tmp_path / "model.gguf")       # a copy: replaced by another model's bytes below
    shutil.copy(MODEL, model)
    out = str(tmp_path / "emb")
    argv = ["-m", model, "-i", str(data), "-o", out, "--no-pad", "--pool", "mean", "--files-per-shard", "2"]
    good = [str(data / "speech_16k.wav"), str(data / "speech_44k1_stereo_s16.wav"), str(data / "sub" / "long_70s_16k.wav")]

    first = embed_dataset.main(argv)
    assert first["files"] == 4 and first["done"] == 3 and first["encoded"] == 3
    assert list(first["errors"]) == [str(data / "broken.wav")]
    t = check_against_main(tmp_path, out, good, "--no-pad", "--pool", "mean")
    assert t.schema.field("embedding").type == pa.list_(pa.float32(), 128)      # pooled: a fixed-size list of d
    assert set(t["id"].to_pylist()) == {"speech_16k.wav", "speech_44k1_stereo_s16.wav", "sub/long_70s_16k.wav"}
    settings = {"layer": None, "final_ln": True, "pool": "mean", "no_pad": True, "outtype": "f32", "dtype": "f16"}
    columns = dict(settings, model_sha256=gguf_sha256(MODEL, tmp_path), compute="cpu")
    del columns["dtype"]                        # the manifest's; a row says where it was computed
    for name, value in columns.items():
        assert t[name].to_pylist() == [value] * t.num_rows, name
    m = read_manifest(out)      # the model, settings and version once; then the inputs in order
    assert m["model"]["sha256"] == gguf_sha256(MODEL, tmp_path) and m["model"]["hparams"]["n_state"] == 128
    assert m["settings"] == settings and m["format"] == "parquet"
    import whisper_audio
    assert m["library_version"] == whisper_audio.version()
    assert [e["id"] for e in m["files"]] == ["broken.wav", "speech_16k.wav", "speech_44k1_stereo_s16.wav",
                                             "sub/long_70s_16k.wav"]
    assert "broken.wav" in m["files"][0]["error"]
    assert [e["windows"] for e in m["files"][1:]] == [1, 1, 3]
    assert all("model" not in e and "settings" not in e for e in m["files"])
    pq_dir = os.path.join(out, "parquet")
    before = {n: os.path.getmtime(os.path.join(pq_dir, n)) for n in os.listdir(pq_dir)}

    # a new file and a second run: only the new one (and the broken one, again) is done
    shutil.copy(os.path.join(AUDIO, "speech_16k.ogg"), data / "speech_16k.ogg")
    second = embed_dataset.main(argv)
    assert second["files"] == 5 and second["done"] == 4 and second["encoded"] == 1
    assert {n: os.path.getmtime(os.path.join(pq_dir, n)) for n in before} == before
    good.append(str(data / "speech_16k.ogg"))
    check_against_main(tmp_path, out, good, "--no-pad", "--pool", "mean")

    # an interrupted write (a file cut short, no footer) is removed and its inputs done again
    long_file = next(e for e in read_manifest(out)["files"] if e["id"] == "sub/long_70s_16k.wav")["parquet"][0]
    lost = pq.read_table(os.path.join(pq_dir, long_file))["path"].unique().to_pylist()
    with open(os.path.join(pq_dir, long_file), "r+b") as f:
        f.truncate(os.path.getsize(os.path.join(pq_dir, long_file)) // 2)
    third = embed_dataset.main(argv)
    assert third["encoded"] == len(lost) and third["done"] == 4 and not os.path.exists(os.path.join(pq_dir, long_file))
    check_against_main(tmp_path, out, good, "--no-pad", "--pool", "mean")

    # an input with a window missing (its rows split over files, one of them lost): its other
    # rows are dropped and it is done again, so that no input is there twice
    long_file = next(e for e in read_manifest(out)["files"] if e["id"] == "sub/long_70s_16k.wav")["parquet"][0]
    t = pq.read_table(os.path.join(pq_dir, long_file))
    pq.write_table(t.filter(pa.compute.invert(pa.compute.and_(pa.compute.equal(t["id"], "sub/long_70s_16k.wav"),
                                                              pa.compute.equal(t["window_index"], 1)))),
                   os.path.join(pq_dir, long_file))
    fourth = embed_dataset.main(argv)
    assert fourth["encoded"] == 1 and fourth["done"] == 4
    check_against_main(tmp_path, out, good, "--no-pad", "--pool", "mean")

    # another model (the same path, other bytes), other settings, the other format: refused
    shutil.copy(MODEL_F16, model)
    with pytest.raises(SystemExit, match=r"another model \(sha256\)"):
        embed_dataset.main(argv)
    shutil.copy(MODEL, model)
    with pytest.raises(SystemExit, match="another settings"):
        embed_dataset.main(argv + ["--outtype", "f16"])
    with pytest.raises(SystemExit, match="another format"):
        embed_dataset.main(argv + ["--format", "npy"])
    assert embed_dataset.main(argv)["encoded"] == 0      # nothing was touched: all done


def test_parquet_readers_and_f16(tmp_path, local_ray):
    # f16 rows (Parquet FLOAT16) and per-position rows (a list of fixed-size lists): pyarrow,
    # pandas and duckdb read the same values, main's (duckdb widens f16 to FLOAT: exactly)
    duckdb = pytest.importorskip("duckdb", reason="duckdb is not installed (pip install duckdb)")
    files = [os.path.join(AUDIO, n) for n in ["speech_16k.wav", "long_70s_16k.wav"]]
    listing = tmp_path / "files.txt"
    listing.write_text("# two files\n" + "\n".join(files) + "\n" + files[0] + "\n")   # one listed twice: done once
    for outtype, args in (("f16", ["--no-pad"]), ("f16", ["--pool", "mean"]), ("f32", ["--layer", "0"])):
        out = str(tmp_path / f"emb-{outtype}-{args[0]}")
        result = embed_dataset.main(["-m", MODEL, "--list", str(listing), "-o", out, "--outtype", outtype] + args)
        assert result["done"] == 2 and result["files"] == 2 and not result["errors"]
        t = check_against_main(tmp_path, out, files, "--outtype", outtype, *args)
        value = pa.float16() if outtype == "f16" else pa.float32()
        row = pa.list_(value, 128)
        assert t.schema.field("embedding").type == (row if "--pool" in args else pa.list_(row))
        ref, _ = main_run(tmp_path, files, "--outtype", outtype, *args)
        ref = {p: r.reshape(-1, 128) for p, r in ref.items()}
        glob = os.path.join(out, "parquet", "*.parquet")

        df = __import__("pandas").read_parquet(os.path.join(out, "parquet")).sort_values(["path", "window_index"])
        for path in files:
            cells = df[df.path == path].embedding.tolist()
            got = np.stack(cells) if "--pool" in args else np.concatenate([np.stack(c) for c in cells])
            assert got.dtype == ref[path].dtype and np.array_equal(got, ref[path]), ("pandas", path)

        con = duckdb.connect()
        assert con.sql(f"SELECT count(*), count(DISTINCT path), max(windows) FROM '{glob}'").fetchall() == [(4, 2, 3)]
        for path in files:
            cells = [r[0] for r in con.sql(f"SELECT embedding FROM '{glob}' WHERE path = ? ORDER BY window_index",
                                           params=[path]).fetchall()]
            got = np.array(cells if "--pool" in args else [p for c in cells for p in c], np.float32)
            assert np.array_equal(got, ref[path].astype(np.float32)), ("duckdb", path)


def test_npy_shards(tmp_path, local_ray):
    files = [os.path.join(AUDIO, n) for n in ["speech_16k.wav", "long_70s_16k.wav", "speech_16k.mp3"]]
    listing = tmp_path / "files.txt"
    listing.write_text("\n".join(files) + "\n")
    out = str(tmp_path / "emb")
    argv = ["-m", MODEL, "--list", str(listing), "-o", out, "--outtype", "f16", "--format", "npy"]
    result = embed_dataset.main(argv)
    assert result["done"] == 3 and not result["errors"]
    m = read_manifest(out)
    assert m["format"] == "npy" and m["model"]["sha256"] == gguf_sha256(MODEL, tmp_path)
    entries = m["files"]
    assert [e["rows"] for e in entries] == [1, 3, 1] and [e["windows"] for e in entries] == [1, 3, 1]
    ref, _ = main_run(tmp_path, files, "--outtype", "f16")
    for e in entries:
        shard = np.load(os.path.join(out, "shards", e["shard"] + ".npy"))
        assert np.array_equal(shard[e["first_row"]:e["first_row"] + e["rows"]], ref[e["file"]]), e["file"]
    os.remove(os.path.join(out, "shards", entries[1]["shard"] + ".json"))       # an interrupted shard: done again
    assert embed_dataset.main(argv)["encoded"] == sum(e["shard"] == entries[1]["shard"] for e in entries)
    with pytest.raises(SystemExit, match="another settings"):
        embed_dataset.main(argv[:-4])
    (tmp_path / "bad.gguf").write_bytes(b"not a model")      # the loader's message, before Ray is asked
    with pytest.raises(SystemExit, match="bad.gguf"):
        embed_dataset.main(["-m", str(tmp_path / "bad.gguf")] + argv[2:])
    with pytest.raises(SystemExit, match="--layer 2: the model has layers 0 to 1"):
        embed_dataset.main(argv + ["--layer", "2"])


def test_actors_never_ask_for_more_than_the_cluster_has(tmp_path, local_ray, capsys):
    # CPU actors: --threads capped at the largest live node (an actor no node holds: Ray waits
    # forever, issue 23); the actors write their own files, so they may hold every CPU
    node = lambda cpus, alive=True: {"Alive": alive, "Resources": {"CPU": float(cpus)}}    # noqa: E731
    assert embed_dataset.cpu_actors(None, 0, [node(2)]) == (2, 1)
    assert embed_dataset.cpu_actors(None, 0, [node(2), node(64, alive=False)]) == (2, 1)
    assert embed_dataset.cpu_actors(None, 0, [node(15)]) == (3, 5)              # 15 CPUs at work, not 12
    assert embed_dataset.cpu_actors(None, 0, [node(64), node(64)]) == (4, 32)
    assert embed_dataset.cpu_actors(4, 0, [node(2)]) == (2, 1)
    assert embed_dataset.cpu_actors(1, 8, [node(4)]) == (1, 4)
    assert embed_dataset.cpu_actors(None, 0, [node(1)]) == (1, 1)
    with pytest.raises(SystemExit, match="has 0 CPU"):
        embed_dataset.cpu_actors(None, 0, [{"Alive": True, "Resources": {"GPU": 1.0}}])
    # GPU actors: one per GPU, or --actors sharing them; each takes a CPU too
    assert embed_dataset.gpu_actors(0, 1, 16) == (1.0, 1)
    assert embed_dataset.gpu_actors(2, 1, 16) == (0.5, 2)
    assert embed_dataset.gpu_actors(3, 2, 16) == (0.5, 3)
    assert embed_dataset.gpu_actors(8, 1, 4) == (1 / 4, 4)
    # on this 2-CPU instance, the defaults: one actor of both threads
    out = str(tmp_path / "emb")
    listing = tmp_path / "one.txt"
    listing.write_text(os.path.join(AUDIO, "speech_16k.wav") + "\n")
    result = embed_dataset.main(["-m", MODEL, "--list", str(listing), "-o", out, "--threads", "64"])
    assert result["done"] == 1 and not result["errors"]
    printed = capsys.readouterr().out
    assert "--threads 64: the largest node has 2 CPUs; using 2" in printed
    assert "1 cpu actor(s) of 2 threads" in printed


def test_any_model_main_takes_and_main_s_exit_status(tmp_path, local_ray):
    # a Hugging Face directory as -m (the package loads it, as main does), one bad file among two
    # good ones: the good ones done, run() gives main's 3, and the same rows as main's on the GGUF
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF not audio")
    good = [os.path.join(AUDIO, "speech_16k.wav"), os.path.join(AUDIO, "speech_8k_mono_u8.wav")]
    listing = tmp_path / "files.txt"
    listing.write_text("\n".join(good + [str(bad)]) + "\n")
    out = str(tmp_path / "out")
    rc = embed_dataset.run(["-m", os.path.join(ROOT, "tests", "data", "micro-80"), "--list", str(listing), "-o", out,
                            "--format", "npy", "--pool", "mean"])
    assert rc == 3
    m = read_manifest(out)
    assert [("error" in e) for e in m["files"]] == [False, False, True]
    ref, _ = main_run(tmp_path, good, "--pool", "mean")
    for e in m["files"][:2]:
        shard = np.load(os.path.join(out, "shards", e["shard"] + ".npy"))
        assert np.array_equal(shard[e["first_row"]:e["first_row"] + e["rows"]], ref[e["file"]]), e["file"]
