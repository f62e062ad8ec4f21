"""examples/ray/embed_dataset.py on bad input: one line on stderr and main's exit status, never a
traceback. These paths stop before Ray is asked, so they run without Ray installed."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "ray", "embed_dataset.py")
MODEL = os.path.join(ROOT, "build", "micro-80-f32.gguf")
WAV = os.path.join(ROOT, "samples", "speech_16k.wav")


@pytest.fixture(autouse=True)
def own_cache(tmp_path_factory, monkeypatch):
    """The example keeps model identities in $XDG_CACHE_HOME: a folder of the test's, not the user's."""
    cache = tmp_path_factory.mktemp("xdg-cache")
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


def load_example():
    spec = importlib.util.spec_from_file_location("embed_dataset", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)


def one_line(r):
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def listing(tmp_path):
    p = tmp_path / "files.txt"
    p.write_text(WAV + "\n")
    return str(p)


def test_a_cut_manifest_is_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text('{"model": {"sha256": "ab')     # a write cut short
    r = run("-m", MODEL, "--list", listing(tmp_path), "-o", str(out))
    assert r.returncode == 1
    assert "manifest.json is not a whole manifest" in one_line(r)
    (out / "manifest.json").write_text("[1, 2]")
    r = run("-m", MODEL, "--list", listing(tmp_path), "-o", str(out))
    assert r.returncode == 1 and "not this example's manifest" in one_line(r)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_read_only_out_is_one_line(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.chmod(out, 0o555)
    try:
        r = run("-m", MODEL, "--list", listing(tmp_path), "-o", str(out))
    finally:
        os.chmod(out, 0o755)
    assert r.returncode == 1
    assert "Permission denied" in one_line(r)


def test_a_full_out_is_one_line(tmp_path):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    # OUT whose manifest is /dev/full: the first write fails with ENOSPC, as on a full disk
    out = tmp_path / "out"
    out.mkdir()
    mod = load_example()
    real_open = open

    def full_open(path, mode="r", *a, **k):
        if "w" in mode and str(path).startswith(str(out)):
            return real_open("/dev/full", mode, *a, **k)
        return real_open(path, mode, *a, **k)
    mod.open = full_open                    # the module's own open: its writes go to a full device
    rc = mod.run(["-m", MODEL, "--list", listing(tmp_path), "-o", str(out)])
    assert rc == 1


def test_a_hugging_face_directory_is_a_model(tmp_path):
    # any -m that main takes: the micro model's Hugging Face directory, through the package's loader
    mod = load_example()
    import whisper_audio
    ident = mod.model_identity(whisper_audio, os.path.join(ROOT, "tests", "data", "micro-80"), str(tmp_path))
    assert ident["hparams"]["n_state"] == 128 and len(ident["sha256"]) == 64
    assert os.listdir(tmp_path) == []       # the GGUF it hashed is gone


def test_a_bad_model_is_one_line(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a model")
    r = run("-m", str(bad), "--list", listing(tmp_path), "-o", str(tmp_path / "out"))
    assert r.returncode == 1 and "bad.gguf" in one_line(r)


def test_the_model_identity_is_kept_and_never_stale(tmp_path, own_cache):
    import shutil
    import whisper_audio
    mod = load_example()
    model = tmp_path / "model.gguf"
    shutil.copy(MODEL, model)
    hashed = []
    real_hash = mod.hash_model
    mod.hash_model = lambda *a: hashed.append(1) or real_hash(*a)
    first = mod.model_identity(whisper_audio, str(model), str(tmp_path))
    assert mod.model_identity(whisper_audio, str(model), str(tmp_path)) == first and len(hashed) == 1   # kept
    assert os.path.isfile(own_cache / "whisper-audio" / "model-identity.json")
    assert sorted(os.listdir(tmp_path)) == ["model.gguf"]           # nothing beside the model
    data = bytearray(model.read_bytes())                            # the same size, other weights
    data[-4:] = b"\x00\x00\x80\x3f"
    model.write_bytes(bytes(data))
    changed = mod.model_identity(whisper_audio, str(model), str(tmp_path))
    assert len(hashed) == 2 and changed["sha256"] != first["sha256"]
    (own_cache / "whisper-audio" / "model-identity.json").write_text("{cut")   # a cut cache: hashed again
    assert mod.model_identity(whisper_audio, str(model), str(tmp_path)) == changed and len(hashed) == 3
