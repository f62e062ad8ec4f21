#!/usr/bin/env python3
"""Reference activations for unpadded (--no-pad) windows, from transformers in float64.

transformers' WhisperEncoder.forward accepts only 3000 mel frames, so this calls its conv
and layer modules directly on the shorter sequence, with the positional embedding sliced
to the first positions, as Ultravox runs short audio. For micro-80 and micro-128
(tests/data) and two windows:
  speech_16k: the fixture log-mel, first 2 * ceil(112259 / 320) = 702 frames (351 positions)
  long_70s_last: WhisperFeatureExtractor on samples [960000, 1120000) of long_70s_16k.wav
                 (zero-padded to 30 s as usual), first 2 * ceil(160000 / 320) = 1000 frames
Writes one .npz (post_conv, layer0, last_hidden_state per model and window, plus the
mel inputs) to $OUT; unpack it into tests/data/encoder/ with numpy.

Needs torch and transformers (the GPU machine has both); runs on the CPU.
"""
import math
import os
import sys
import wave

import numpy as np
import torch
from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_s16(path):
    with wave.open(path) as w:
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def run(encoder, mel):
    """post_conv, layer0 and the output of encoder on mel [n_mels, F], float64."""
    x = torch.from_numpy(mel).double()[None]
    with torch.no_grad():
        x = torch.nn.functional.gelu(encoder.conv1(x))
        x = torch.nn.functional.gelu(encoder.conv2(x))
        x = x.permute(0, 2, 1)
        x = x + encoder.embed_positions.weight[: x.shape[1]]
        post_conv = x
        layer0 = None
        for i, layer in enumerate(encoder.layers):
            x = layer(x, attention_mask=None)
            x = x[0] if isinstance(x, tuple) else x
            if i == 0:
                layer0 = x
        out = encoder.layer_norm(x)
    return [np.ascontiguousarray(t[0].float().numpy()) for t in (post_conv, layer0, out)]


def main():
    out_dir = os.environ.get("OUT", ".")
    long = read_s16(os.path.join(ROOT, "tests/data/audio/long_70s_16k.wav"))
    assert len(long) == 1120000
    arrays = {}
    for n_mels in (80, 128):
        model = WhisperForConditionalGeneration.from_pretrained(os.path.join(ROOT, f"tests/data/micro-{n_mels}"),
                                                                attn_implementation="eager")
        encoder = model.model.encoder.double().eval()
        fe = WhisperFeatureExtractor(feature_size=n_mels)
        speech = np.load(os.path.join(ROOT, f"tests/data/features/speech_16k.mel{n_mels}.npy"))
        last = fe(long[960000:], sampling_rate=16000, return_tensors="np")["input_features"][0]
        for clip, mel, n_samples in (("speech_16k", speech, 112259), ("long_70s_last", last, 160000)):
            frames = 2 * math.ceil(n_samples / 320)
            mel = np.ascontiguousarray(mel[:, :frames], dtype=np.float32)
            names = ("post_conv", "layer0", "last_hidden_state")
            for name, a in zip(names, run(encoder, mel)):
                arrays[f"micro-{n_mels}/{clip}.nopad.{name}"] = a
            arrays[f"micro-{n_mels}/{clip}.nopad.mel"] = mel
            print(f"micro-{n_mels} {clip}: {frames} frames -> {frames // 2} positions")
    np.savez(os.path.join(out_dir, "nopad-reference.npz"), **arrays)
    print("wrote", os.path.join(out_dir, "nopad-reference.npz"), len(arrays), "arrays; transformers",
          __import__("transformers").__version__, "torch", torch.__version__)


if __name__ == "__main__":
    sys.exit(main())
