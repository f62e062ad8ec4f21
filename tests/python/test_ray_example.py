# examples/ray/embed_dataset.py on a local Ray instance that this test starts (CPU actors, the
# random micro model, a few files): its shards must hold main's rows bit for bit, a bad file
# is reported without stopping the others, and a second run does only what is not done yet.
import importlib.util
import json
import os
import shutil
import subprocess

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'ray[data]')")
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")   # Ray's own, about its own settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAIN = os.path.join(ROOT, os.environ.get("WA_MAIN", "build/main"))
MODEL = os.path.join(ROOT, "build", "micro-80-f32.gguf")
AUDIO = os.path.join(ROOT, "tests", "data", "audio")

spec = importlib.util.spec_from_file_location("embed_dataset", os.path.join(ROOT, "examples", "ray", "embed_dataset.py"))
embed_dataset = importlib.util.module_from_spec(spec)
spec.loader.exec_module(embed_dataset)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def main_rows(tmp_path, path, *args):
    out = str(tmp_path / "main.npy")
    r = subprocess.run([MAIN, "-m", MODEL, "-f", path, "-o", out, "--device", "cpu", "--no-progress"] + list(args),
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return np.load(out)


def read_manifest(out):
    with open(os.path.join(out, "manifest.jsonl")) as f:
        return [json.loads(line) for line in f]


def check_against_main(tmp_path, out, entries, *args):
    for e in entries:
        shard = np.load(os.path.join(out, "shards", e["shard"] + ".npy"))
        rows = shard[e["first_row"]:e["first_row"] + e["rows"]]
        assert np.array_equal(rows, main_rows(tmp_path, e["file"], *args)), e["file"]


def test_embed_dataset_resumes(tmp_path, local_ray):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for name in ["long_70s_16k.wav", "speech_16k.wav", "speech_44k1_stereo_s16.wav"]:
        shutil.copy(os.path.join(AUDIO, name), data / "sub" / name if name.startswith("long") else data / name)
    (data / "broken.wav").write_text("not audio")
    out = str(tmp_path / "emb")
    argv = ["-m", MODEL, "-i", str(data), "-o", out, "--no-pad", "--pool", "mean", "--files-per-shard", "2",
            "--threads", "1"]

    first = embed_dataset.main(argv)
    assert first["files"] == 4 and first["done"] == 3 and first["encoded"] == 3
    assert list(first["errors"]) == [str(data / "broken.wav")]
    entries = read_manifest(out)
    assert [os.path.basename(e["file"]) for e in entries] == ["broken.wav", "speech_16k.wav",
                                                              "speech_44k1_stereo_s16.wav", "long_70s_16k.wav"]
    assert "broken.wav" in entries[0]["error"]
    done = entries[1:]
    assert [e["rows"] for e in done] == [1, 1, 3]
    assert abs(done[2]["duration"] - 70.0) < 0.01
    assert done[0]["settings"] == {"layer": None, "final_ln": True, "pool": "mean", "no_pad": True, "outtype": "f32"}
    assert done[0]["model"]["n_state"] == 128
    check_against_main(tmp_path, out, done, "--no-pad", "--pool", "mean")
    shards_before = {n: os.path.getmtime(os.path.join(out, "shards", n)) for n in os.listdir(os.path.join(out, "shards"))}

    # a new file and a second run: only the new one (and the broken one, again) is done
    shutil.copy(os.path.join(AUDIO, "speech_16k.ogg"), data / "speech_16k.ogg")
    second = embed_dataset.main(argv)
    assert second["files"] == 5 and second["done"] == 4 and second["encoded"] == 1
    for name, mtime in shards_before.items():
        assert os.path.getmtime(os.path.join(out, "shards", name)) == mtime
    entries = read_manifest(out)
    new = [e for e in entries if e["file"].endswith(".ogg")]
    assert new[0]["shard"] + ".npy" not in shards_before
    check_against_main(tmp_path, out, new, "--no-pad", "--pool", "mean")

    # an interrupted shard (its .json never written) is done again
    os.remove(os.path.join(out, "shards", new[0]["shard"] + ".json"))
    third = embed_dataset.main(argv)
    assert third["encoded"] == 1 and third["done"] == 4

    # other settings into the same directory: refused, nothing mixed
    with pytest.raises(SystemExit, match="another model or settings"):
        embed_dataset.main(argv[:-4] + ["--outtype", "f16"])


def test_embed_dataset_list_full_windows(tmp_path, local_ray):
    files = [os.path.join(AUDIO, n) for n in ["speech_16k.wav", "long_70s_16k.wav", "speech_16k.mp3"]]
    listing = tmp_path / "files.txt"
    listing.write_text("# three files\n" + "\n".join(files) + "\n")
    out = str(tmp_path / "emb")
    result = embed_dataset.main(["-m", MODEL, "--list", str(listing), "-o", out, "--outtype", "f16", "--threads", "1"])
    assert result["done"] == 3 and not result["errors"]
    entries = read_manifest(out)
    assert [e["rows"] for e in entries] == [1, 3, 1]
    check_against_main(tmp_path, out, entries, "--outtype", "f16")


def test_threads_capped_at_the_largest_node(tmp_path, local_ray, capsys):
    # --threads 4 (the default) on nodes of 2 CPUs asked Ray for an actor no node could hold:
    # it waited forever (issue 23)
    assert embed_dataset.actor_threads(4, [{"Alive": True, "Resources": {"CPU": 2.0}},
                                           {"Alive": False, "Resources": {"CPU": 64.0}}]) == 2
    assert embed_dataset.actor_threads(1, [{"Alive": True, "Resources": {"CPU": 2.0}}]) == 1
    with pytest.raises(SystemExit, match="no node with a CPU"):
        embed_dataset.actor_threads(4, [{"Alive": True, "Resources": {"GPU": 1.0}}])
    out = str(tmp_path / "emb")
    result = embed_dataset.main(["-m", MODEL, "--list", str(_one_file_list(tmp_path)), "-o", out, "--threads", "64"])
    assert result["done"] == 1 and not result["errors"]
    assert "--threads 64: the largest node has 2 CPUs; using 2" in capsys.readouterr().out


def _one_file_list(tmp_path):
    listing = tmp_path / "one.txt"
    listing.write_text(os.path.join(AUDIO, "speech_16k.wav") + "\n")
    return listing
