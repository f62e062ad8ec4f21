#!/usr/bin/env python3
# convert-hf-to-gguf.py - Hugging Face Whisper checkpoint -> whisper-audio model file (GGUF v3).
#
#   python3 convert/convert-hf-to-gguf.py DIR -o model.gguf [--outtype f32|f16|bf16]
#   python3 convert/convert-hf-to-gguf.py --random SIZE -o model.gguf [--seed N] [--init-std S]
#   python3 convert/convert-hf-to-gguf.py ggml-base.bin -o model.gguf   (whisper.cpp's legacy file)
#   python3 convert/convert-hf-to-gguf.py faster-whisper-base -o model.gguf   (a CTranslate2 directory)
#
# whisper.cpp's files and CTranslate2 directories are handed to whisper-audio's own loader, their
# one reader: `main -m SRC --save-gguf OUT` writes this file's layout, its matrices as loaded (f16,
# bf16 and the q8_0/q5/q4 blocks kept; CTranslate2's int8/int16 as f32), so that it gives the same
# output, bit for bit; --outtype does not apply to them. main is --main PATH, else $WA_MAIN, else
# build/main or main in the repository above this script (`make` builds it).
#
# DIR is what save_pretrained writes: config.json plus model.safetensors or a sharded
# model.safetensors.index.json. Keys may start with `model.encoder.`
# (WhisperForConditionalGeneration), `encoder.` (WhisperModel, WhisperForAudioClassification)
# or be bare (`conv1.weight`, `layers.N.*`: a WhisperEncoder saved alone). Only the encoder is
# kept; tensors are stored as F32, F16 or BF16 in the checkpoint.
#
# --random SIZE (tiny, base, small, medium, large-v3) writes a model of that real shape with
# random weights drawn like transformers' init. Its embeddings MEAN NOTHING: such a file is
# for tests and benchmarks only.
#
# The file (read by whisper-audio.cpp's loader; gguf-py can read it too):
#   KV:      general.architecture = "whisper", general.name, general.file_type,
#            general.alignment = 32, whisper.encoder.{context_length, embedding_length,
#            block_count, mels_count, attention.head_count, feed_forward_length} (uint32),
#            whisper.encoder.attention.layer_norm_epsilon (float32)
#   tensors: the HF names without `model.`, in graph order, then `mel_filters` [n_mels, 201]:
#            the slaney mel bank of transformers' WhisperFeatureExtractor (which HF checkpoints
#            do not store). Matrices and conv kernels take --outtype; biases, LayerNorm
#            parameters, embed_positions and mel_filters stay F32. GGUF dims are innermost
#            first, so they are the PyTorch shape reversed and the bytes are unchanged.
#            whisper_audio_model_save_gguf writes the same layout (tests keep them equal).
#
# Python 3 standard library only (and main, for a whisper.cpp or CTranslate2 model). numpy,
# when importable, makes it faster; for a conversion both paths write the same bytes
# (WHISPER_AUDIO_NO_NUMPY=1 forces the pure-Python path).

import argparse
import array
import json
import math
import os
import random
import re
import signal
import stat
import struct
import subprocess
import sys
import tempfile

np = None
if os.environ.get("WHISPER_AUDIO_NO_NUMPY", "") in ("", "0"):
    try:
        import numpy as np
    except ImportError:
        np = None

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGUF_ALIGNMENT = 32

# GGUF metadata value types
GGUF_TYPE_UINT32 = 4
GGUF_TYPE_FLOAT32 = 6
GGUF_TYPE_STRING = 8

# ggml tensor types and their element sizes
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_BF16 = 30
GGML_TYPE_SIZE = {GGML_TYPE_F32: 4, GGML_TYPE_F16: 2, GGML_TYPE_BF16: 2}
GGML_TYPE_NAME = {GGML_TYPE_F32: "f32", GGML_TYPE_F16: "f16", GGML_TYPE_BF16: "bf16"}

OUTTYPES = {"f32": GGML_TYPE_F32, "f16": GGML_TYPE_F16, "bf16": GGML_TYPE_BF16}
# general.file_type (llama.cpp's LLAMA_FTYPE_*): ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32
FILE_TYPES = {"f32": 0, "f16": 1, "bf16": 32}

N_CTX = 1500                # encoder positions (30 s of audio after the stride-2 conv)
N_BINS = 201                # n_fft / 2 + 1 for n_fft = 400
SAMPLE_RATE = 16000
HOP = 160                   # samples between mel frames
LAYER_NORM_EPS = 1e-5

# d_model, layers, heads, ffn, mels of the released sizes
SIZES = {
    "tiny":     (384,  4,  6,  1536, 80),
    "base":     (512,  6,  8,  2048, 80),
    "small":    (768,  12, 12, 3072, 80),
    "medium":   (1024, 24, 16, 4096, 80),
    "large-v3": (1280, 32, 20, 5120, 128),
}

# safetensors dtype -> (bytes per element, array typecode of the raw bits)
ST_DTYPES = {"F32": (4, "f"), "F16": (2, "H"), "BF16": (2, "H"), "F64": (8, "d")}

CHUNK = 1 << 20             # elements converted at a time on the pure-Python path


class ConvertError(Exception):
    """A problem with the input that the user can fix: printed as one line, exit code 1."""


# -v: a line per tensor as it is written (name, shape, type)
VERBOSE = False


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------
# hyperparameters and the tensor list
# ---------------------------------------------------------------------------------------

class HParams:
    def __init__(self, n_state, n_layer, n_head, n_ff, n_mels):
        self.n_state = n_state      # d_model
        self.n_layer = n_layer      # encoder_layers
        self.n_head = n_head        # encoder_attention_heads
        self.n_ff = n_ff            # encoder_ffn_dim
        self.n_mels = n_mels        # num_mel_bins
        self.projector = None       # an audio LLM's: "qwen2a", "voxtral", "ultravox", "musicflamingo" (llama.cpp's names)
        self.n_llm = 0              # text_config.hidden_size: the projector's output
        self.stack_factor = 1       # frames per token
        self.n_proj_ff = 0          # Ultravox: hidden_size, linear_1's output (SwiGLU halves it)
        self.ln_mid = False         # Ultravox: projector_ln_mid (v0.5+), else ln_post
        self.n_rot = 0              # GLM-ASR: the dims of each head that RoPE turns (no positional embedding)
        self.rope_theta = 0.0       # GLM-ASR: rope_parameters.rope_theta
        self.n_chunk = 0            # Qwen2.5-Omni: n_window * 2, the mel frames of a chunk (conv stem, attention)
        self.n_causal = 0           # MiniCPM-o: audio_chunk_length * 50, the positions of a block-causal block
        self.proj_eps = ULTRAVOX_RMS_EPS   # the projector's norm eps (Kimi-Audio: its LayerNorm's rms_norm_eps)
        self.n_conv = 0             # Qwen3-Omni: downsample_hidden_size, the channels of its Conv2d stem
        self.n_attn_window = 0      # Qwen3-Omni: n_window_infer, the mel frames of an attention window
        self.n_time_rot = 0         # Music Flamingo: the channels each axis of its rotary time embedding turns
        self.time_rope_theta = 0.0  # ... its rope_theta
        self.time_rope_step = 0.0   # ... the seconds between its rows (audio_frame_step x 4)
        self.model_type = "whisper" # config.json's: its row of WA_HF_TOWERS
        self.eps = LAYER_NORM_EPS   # the encoder's norms' (Voxtral Realtime: its RMSNorms' rms_norm_eps)
        self.head_dim = 0           # Voxtral Realtime: the width of a head of q, k and v (0: d_model / heads)
        self.n_window = 0           # Voxtral Realtime: its attention's sliding window, in positions
        self.pad_left = 0           # Voxtral Realtime: its processor's tokens of zeros before the audio
        self.pad_right = 0          # ... and after it (past its last whole token)


# Audio LLMs whose audio tower is a Whisper encoder, and Whisper itself: whisper-audio-arch.h's tables,
# the rows the library's directory reader walks. WA_HF_TOWERS: config.json's model_type -> projector,
# where the encoder's config sits and which key gives which hyperparameter; WA_HF_SETTINGS: the settings
# whisper-audio runs one way; WA_HF_RENAMES: our encoder names -> the checkpoint's; WA_HF_PREFIXES:
# where the encoder's tensors are. Their audio tower and projector are converted; the language model
# is left out.
# Audio Flamingo 3's is "musicflamingo": llama.cpp's converter writes that type for it. Music Flamingo's is
# the same type with the keys of its rotary time embedding (whisper.projector.time_rope.*), which Audio
# Flamingo 3's files lack.
# GLM-ASR's is "glmasr" (transformers' layout: RoPE, no positional embedding), not llama.cpp's "glma"
# (the original checkpoint's layout: a positional embedding, a LayerNorm before the MLP, boi/eoi).
ARCH_H = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "whisper-audio-arch.h")


def arch_rows(table, n):
    """The rows of one of whisper-audio-arch.h's checkpoint tables (WA_HF_TOWERS, WA_HF_SETTINGS,
    WA_HF_RENAMES, WA_HF_PREFIXES): the library's directory reader walks the same rows, so the two readers
    take the same settings and name the same tensors. Each row is one line of string literals in braces;
    the first n fields are kept."""
    try:
        with open(ARCH_H) as f:
            text = f.read()
    except OSError as e:
        raise SystemExit("convert-hf-to-gguf.py: %s: %s (the converter reads its tower tables; keep it beside "
                         "convert/, as in the source tree)" % (ARCH_H, e))
    body = re.search(r"static const \w+ %s\[\] = \{(.*?)\n\};" % table, text, re.S)
    if not body:
        raise SystemExit("convert-hf-to-gguf.py: %s: no table %s" % (ARCH_H, table))
    rows = [re.findall(r'"([^"]*)"', m) for m in re.findall(r"^\s*\{([^{}]*)\},", body.group(1), re.M)]
    return [tuple(r[:n]) for r in rows]


TOWER_FIELDS = ("model_type", "projector", "encoder", "d_model", "layers", "heads", "ffn", "mels", "positions",
                "activation", "llm", "embed_positions", "unused")
TOWERS = {r[0]: dict(zip(TOWER_FIELDS, r)) for r in arch_rows("WA_HF_TOWERS", len(TOWER_FIELDS))}
SETTINGS = arch_rows("WA_HF_SETTINGS", 4)
# our encoder names -> the checkpoint's where they differ (below the encoder's prefix), per projector
HF_RENAMES = arch_rows("WA_HF_RENAMES", 3)
PREFIXES = arch_rows("WA_HF_PREFIXES", 2)
# the largest hyperparameters the loader takes (whisper-audio.cpp's GGUF key bounds); others 2^20
HPARAM_MAX = {"d_model": 16384, "layers": 256, "heads": 256, "ffn": 65536, "mels": 512, "llm": 65536}
# MiniCPM-o 2.6 (OpenBMB's modeling_minicpmo.py, not in transformers): its apm (a WhisperEncoder) and
# audio_projection_layer (linear1, ReLU, linear2) at the checkpoint's top level beside llm.*, vpm.*,
# resampler.* and tts.*, which are left out; audio_avg_pooler has no weights (AvgPool1d(audio_pool_step)).
# Kimi-Audio (MoonshotAI's MoonshotKimiaForCausalLM): the Whisper-large-v3 encoder in its
# whisper-large-v3/ subdirectory (a WhisperModel checkpoint of its own), 4 positions stacked
# (kimia_adaptor_input_dim = 4 d_model), the LLM's model.vq_adaptor.
KIMI_STACK = 4                      # tokenize_waveform's token_len * 4 positions; extract_whisper_feat's reshape
# MERaLiON-2 (MERaLiON2ForConditionalGeneration, from the hub's own code): its Whisper encoder as
# speech_encoder.* (config.json's speech_config), ln_speech and speech_audio_adapter (mlp_adapter.0,
# gate_proj, pool_proj, out_proj: MERaLiON2SpeechAudioAdaperLarge) beside text_decoder.*, left out;
# speech_mlp_scale_factor positions stacked; ln_speech an nn.LayerNorm of its default eps.
MERALION_LN_EPS = 1e-5
MINICPMO_POSITIONS_PER_S = 50       # get_audio_embedding: chunk_num_frame = int(chunk_length * 50)
# Qwen2.5-Omni's audio tower (thinker.audio_tower): Whisper's names but ln_post for layer_norm; its
# positional embedding is a buffer the checkpoint does not hold (computed here as transformers does);
# audio_bos_eos_token is left out: Qwen2_5OmniAudioEncoder.forward (the audio-feature path) never
# uses it (the thinker marks audio with the text tokens audio_start/end_token_id).
# Qwen3-Omni's audio tower (Qwen3OmniMoeAudioEncoder, thinker.audio_tower): Whisper's layer names
# (k_proj with a bias), ln_post for layer_norm, a Conv2d stem (conv2d1-3, conv_out) for conv1/conv2,
# the sinusoids computed (a buffer the checkpoint does not hold), proj1 / GELU / proj2 its projector.
# Qwen3-ASR (Qwen3ASRForConditionalGeneration, transformers qwen3_asr): the same encoder under
# model.audio_tower (or audio_tower), its projector beside it as multi_modal_projector.linear_1 / linear_2;
# its config's audio_config holds the encoder's sizes and windows (no thinker_config).
# GLM-ASR (GlmAsrEncoder under its audio_tower: Llama's names, WA_HF_RENAMES).
GLMASR_MERGE = 4                    # GlmAsrModel.get_audio_features: merge_factor
ULTRAVOX_RMS_EPS = 1e-6             # ultravox_model.py's RMSNorm default
# Voxtral Realtime (VoxtralRealtimeForConditionalGeneration): its audio_tower (embedder.conv1/2, layers with
# o_proj and a SwiGLU mlp, norm) and multi_modal_projector (linear_1, linear_2, no biases) beside the
# language model, left out; its processor's padding is mistral_common's (tekken.json's streaming_n_left_pad_tokens,
# 32 in the released model; after the audio the delay's tokens, 1, and OFFLINE_STREAMING_BUFFER_TOKENS 10).
REALTIME_STACK = 4                  # downsample_factor: 4 positions a token
REALTIME_LEFT_PAD = 32
REALTIME_BUFFER_TOKENS = 10
# Step-Audio 2 (StepFun's StepAudio2ForCausalLM, its own modeling_step_audio_2.py): an OpenAI-Whisper
# AudioEncoder (encoder.*: blocks.N.attn.query, ..., after_norm after its avg_pooler) and its Adaptor
# (adapter.conv, linear1, ReLU, linear2) beside the LLM's model.* and lm_head, which are left out.
# audio_encoder_config holds the sizes (n_audio_state, ...; the MLP is 4 n_audio_state), llm_dim the
# adapter's output; its names of our encoder tensors in WA_HF_RENAMES.


def hf_name(projector, ours):
    """The checkpoint's name of our encoder tensor below the encoder's prefix (WA_HF_RENAMES: Step-Audio 2's
    layers.N.fc1.weight -> blocks.N.mlp.0.weight); a name no row of the projector matches is Whisper's."""
    for proj, pattern, theirs in HF_RENAMES:
        if proj != projector:
            continue
        m = re.match(re.escape(pattern).replace(re.escape("%d"), r"(\d+)"), ours)
        if m:
            return (theirs % int(m.group(1)) if m.groups() else theirs) + ours[m.end():]
    return ours


def arch_proj_tensors():
    """whisper-audio-arch.h's WA_PROJ_TENSORS, the projectors' tensors as the library checks them:
    (projector's GGUF name, tensor name, shape symbols, a matrix, one of an either pair) in file order."""
    with open(ARCH_H) as f:
        text = f.read()
    gguf = dict(re.findall(r'\{WHISPER_AUDIO_PROJECTOR_(\w+),\s*"([^"]+)"', text))
    body = re.search(r"WA_PROJ_TENSORS\[\] = \{(.*?)\n\};", text, re.S).group(1)
    rows = re.findall(r'\{"([^"]+)",\s*WHISPER_AUDIO_PROJECTOR_(\w+),\s*\{([^}]*)\},\s*(WA_MATRIX|WA_F32),\s*'
                      r'&wa_projector::\w+\s*(,\s*true)?\}', body)
    return [(gguf[p], name, [x.strip() for x in shape.split(",")], kind == "WA_MATRIX", bool(either))
            for name, p, shape, kind, either in rows]


PROJ_TENSORS = arch_proj_tensors()


def projector_tensors(hp):
    """The projector's (name in the model file = the checkpoint's, PyTorch shape, takes --outtype), from
    WA_PROJ_TENSORS; of Ultravox's either pair ln_mid (projector_ln_mid) or ln_post."""
    d, n, s, h = hp.n_state, hp.n_llm, hp.stack_factor, hp.n_proj_ff
    dims = {"WA_D": d, "WA_LLM": n, "WA_STACKED": s * d, "WA_PFF": h, "WA_PFF_HALF": h // 2, "WA_D5": 5 * d}
    out = []
    for proj, name, shape, matrix, either in PROJ_TENSORS:
        if proj != hp.projector or (either and name.endswith(".ln_mid.weight") != hp.ln_mid):
            continue
        out.append((name, tuple(dims[x] if x in dims else int(x) for x in shape), matrix))
    return out


def encoder_tensors(hp):
    """(name in the model file, PyTorch shape, takes --outtype) in file order."""
    d, f, m = hp.n_state, hp.n_ff, hp.n_mels
    if hp.n_window:                        # Voxtral Realtime: RMSNorms (no bias), q/k/v heads x head_dim wide, SwiGLU
        a = hp.n_head * hp.head_dim
        out = [
            ("encoder.conv1.weight", (d, m, 3), True),
            ("encoder.conv1.bias", (d,), False),
            ("encoder.conv2.weight", (d, d, 3), True),
            ("encoder.conv2.bias", (d,), False),
        ]
        for i in range(hp.n_layer):
            p = "encoder.layers.%d." % i
            out += [
                (p + "self_attn.q_proj.weight", (a, d), True),
                (p + "self_attn.q_proj.bias", (a,), False),
                (p + "self_attn.k_proj.weight", (a, d), True),
                (p + "self_attn.v_proj.weight", (a, d), True),
                (p + "self_attn.v_proj.bias", (a,), False),
                (p + "self_attn.out_proj.weight", (d, a), True),
                (p + "self_attn.out_proj.bias", (d,), False),
                (p + "self_attn_layer_norm.weight", (d,), False),
                (p + "fc2.weight", (d, f), True),
                (p + "fc2.bias", (d,), False),
                (p + "final_layer_norm.weight", (d,), False),
                (p + "mlp.up_proj.weight", (f, d), True),
                (p + "mlp.gate_proj.weight", (f, d), True),
            ]
        return out + [("encoder.layer_norm.weight", (d,), False)]
    if hp.n_conv:                          # the AuT's stem (Conv2d over frequency and time)
        c, f3 = hp.n_conv, (((m + 1) // 2 + 1) // 2 + 1) // 2
        out = [
            ("encoder.embed_positions.weight", (N_CTX, d), False),
            ("encoder.conv2d1.weight", (c, 1, 3, 3), True),
            ("encoder.conv2d1.bias", (c,), False),
            ("encoder.conv2d2.weight", (c, c, 3, 3), True),
            ("encoder.conv2d2.bias", (c,), False),
            ("encoder.conv2d3.weight", (c, c, 3, 3), True),
            ("encoder.conv2d3.bias", (c,), False),
            ("encoder.conv_out.weight", (d, c * f3), True),
        ]
    else:
        out = [
            ("encoder.conv1.weight", (d, m, 3), True),
            ("encoder.conv1.bias", (d,), False),
            ("encoder.conv2.weight", (d, d, 3), True),
            ("encoder.conv2.bias", (d,), False),
            ("encoder.embed_positions.weight", (N_CTX, d), False),
        ]
    for i in range(hp.n_layer):
        p = "encoder.layers.%d." % i
        out += [
            (p + "self_attn.q_proj.weight", (d, d), True),
            (p + "self_attn.q_proj.bias", (d,), False),
            (p + "self_attn.k_proj.weight", (d, d), True),
            (p + "self_attn.v_proj.weight", (d, d), True),
            (p + "self_attn.v_proj.bias", (d,), False),
            (p + "self_attn.out_proj.weight", (d, d), True),
            (p + "self_attn.out_proj.bias", (d,), False),
            (p + "self_attn_layer_norm.weight", (d,), False),
            (p + "self_attn_layer_norm.bias", (d,), False),
            (p + "fc1.weight", (f, d), True),
            (p + "fc1.bias", (f,), False),
            (p + "fc2.weight", (d, f), True),
            (p + "fc2.bias", (d,), False),
            (p + "final_layer_norm.weight", (d,), False),
            (p + "final_layer_norm.bias", (d,), False),
        ]
        if hp.n_conv:
            out.append((p + "self_attn.k_proj.bias", (d,), False))
    out += [
        ("encoder.layer_norm.weight", (d,), False),
        ("encoder.layer_norm.bias", (d,), False),
    ]
    return out


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def tensor_nbytes(shape, gtype):
    return numel(shape) * GGML_TYPE_SIZE[gtype]


# ---------------------------------------------------------------------------------------
# the mel bank (transformers audio_utils.mel_filter_bank, norm="slaney", mel_scale="slaney")
# ---------------------------------------------------------------------------------------

def hz_to_mel_slaney(f):
    # linear below 1 kHz (3 mels per 200 Hz), logarithmic above: 27 mels per factor 6.4
    if f < 1000.0:
        return 3.0 * f / 200.0
    return 15.0 + math.log(f / 1000.0) * (27.0 / math.log(6.4))


def mel_to_hz_slaney(m):
    if m < 15.0:
        return 200.0 * m / 3.0
    return 1000.0 * math.exp((math.log(6.4) / 27.0) * (m - 15.0))


def linspace(a, b, n):
    # numpy.linspace's arithmetic: start + i * step, the last point exactly b
    step = (b - a) / (n - 1)
    v = [i * step + a for i in range(n)]
    v[-1] = b
    return v


def mel_filters(n_mels, n_bins=N_BINS, sr=SAMPLE_RATE, fmin=0.0, fmax=8000.0):
    """The slaney mel bank as rows [n_mels][n_bins] of Python floats (float64)."""
    # n_mels + 2 points equally spaced in mel, mapped back to Hz: filter i is the triangle
    # rising from point i to point i+1 and falling to point i+2
    mels = linspace(hz_to_mel_slaney(fmin), hz_to_mel_slaney(fmax), n_mels + 2)
    hz = [mel_to_hz_slaney(m) for m in mels]
    # frequency of each rfft bin: linspace(0, sr / 2, n_bins) (bin k is k * 40 Hz)
    fft_hz = linspace(0.0, float(sr // 2), n_bins)
    rows = []
    for i in range(n_mels):
        lo, mid, hi = hz[i], hz[i + 1], hz[i + 2]
        enorm = 2.0 / (hi - lo)     # slaney: each triangle has unit area in Hz
        row = []
        for f in fft_hz:
            down = -(lo - f) / (mid - lo)   # rising edge, 0 at lo, 1 at mid
            up = (hi - f) / (hi - mid)      # falling edge, 1 at mid, 0 at hi
            row.append(max(0.0, min(down, up)) * enorm)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------------------
# element conversion (raw little-endian bytes in, raw little-endian bytes out)
# ---------------------------------------------------------------------------------------

BIG_ENDIAN = sys.byteorder == "big"


def _arr(typecode, data):
    a = array.array(typecode)
    a.frombytes(data)
    if BIG_ENDIAN:
        a.byteswap()
    return a


def _bytes(a):
    if BIG_ENDIAN:
        a = array.array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _f32_to_f16_bytes_py(vals):
    # struct's 'e' rounds a double to nearest even; an f32 value is exact as a double,
    # so this is the single correct rounding. Overflow raises there instead of giving inf.
    try:
        return struct.pack("<%de" % len(vals), *vals)
    except OverflowError:
        out = bytearray()
        for v in vals:
            try:
                out += struct.pack("<e", v)
            except OverflowError:
                out += b"\x00\xfc" if v < 0 else b"\x00\x7c"
        return bytes(out)


def _f32_bits_to_bf16_py(bits):
    # round to nearest even on the upper 16 bits; NaN stays NaN (quiet bit set)
    return array.array("H", [
        ((u >> 16) | 0x40) if (u & 0x7fffffff) > 0x7f800000
        else ((u + 0x7fff + ((u >> 16) & 1)) >> 16) & 0xffff
        for u in bits])


def convert_elements(data, src, dst):
    """Converts raw LE bytes of safetensors dtype src ("F32", "F16", "BF16", "F64") to ggml
    type dst. Identical results on the numpy and pure-Python paths."""
    if (src, dst) in (("F32", GGML_TYPE_F32), ("F16", GGML_TYPE_F16), ("BF16", GGML_TYPE_BF16)):
        return bytes(data)
    if np is not None:
        if src == "F32":
            a = np.frombuffer(data, dtype="<f4")
        elif src == "F16":
            a = np.frombuffer(data, dtype="<f2").astype(np.float32)
        elif src == "BF16":
            a = (np.frombuffer(data, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            with np.errstate(over="ignore"):
                a = np.frombuffer(data, dtype="<f8").astype(np.float32)
        if dst == GGML_TYPE_F32:
            return a.astype("<f4").tobytes()
        if dst == GGML_TYPE_F16:
            with np.errstate(over="ignore"):
                return a.astype("<f2").tobytes()
        u = a.astype("<f4").view(np.uint32)
        r = ((u + np.uint32(0x7fff) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
        nan = (u & np.uint32(0x7fffffff)) > np.uint32(0x7f800000)
        r[nan] = ((u[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
        return r.astype("<u2").tobytes()

    # pure Python: first to float32 (as an array('f'), or its bits)
    if src == "F32":
        f32 = _arr("f", data)
    elif src == "F16":
        f32 = array.array("f", struct.unpack("<%de" % (len(data) // 2), data))
    elif src == "BF16":
        f32 = array.array("f")
        f32.frombytes(array.array("I", [h << 16 for h in _arr("H", data)]).tobytes())
    else:
        f64 = _arr("d", data)
        f32 = array.array("f")
        for v in f64:       # array('f') rounds to nearest but raises on overflow
            try:
                f32.append(v)
            except OverflowError:
                f32.append(math.copysign(math.inf, v))
    if dst == GGML_TYPE_F32:
        return _bytes(f32)
    if dst == GGML_TYPE_F16:
        return _f32_to_f16_bytes_py(f32)
    bits = array.array("I")
    bits.frombytes(f32.tobytes())
    return _bytes(_f32_bits_to_bf16_py(bits))


def check_finite(data, gtype, name):
    """ConvertError naming the tensor when its bytes (ggml type gtype) hold a NaN or an
    infinity: the loader refuses such a model."""
    # all exponent bits set: inf or NaN, in each format
    width, mask = {GGML_TYPE_F32: (4, 0x7f800000), GGML_TYPE_F16: (2, 0x7c00),
                   GGML_TYPE_BF16: (2, 0x7f80)}[gtype]
    if np is not None:
        u = np.frombuffer(data, dtype="<u4" if width == 4 else "<u2")
        bad = np.flatnonzero((u & mask) == mask)
        first = int(bad[0]) if bad.size else None
    else:
        u = _arr("I" if width == 4 else "H", data)
        first = next((i for i, v in enumerate(u) if (v & mask) == mask), None)
    if first is not None:
        raise ConvertError("tensor %s: element %d is not finite (NaN or inf); the model would "
                           "be refused" % (name, first))


def f64_list_to_f32_bytes(vals):
    if np is not None:
        return np.asarray(vals, dtype=np.float64).astype("<f4").tobytes()
    return _bytes(array.array("f", vals))


# ---------------------------------------------------------------------------------------
# JSON and safetensors, checked as the library's loader checks them (whisper-audio-formats.cpp:
# wa_json_parse, wa_hf_json, wa_st_open, wa_hf_checkpoint_open), with its messages, so that
# the converter and `main -m DIR` take and refuse the same directories
# ---------------------------------------------------------------------------------------

JSON_DEPTH = 64             # WA_JSON_DEPTH: values nested deeper are refused
MAX_JSON = 100 << 20        # WA_HF_MAX_JSON: config.json, the shard index
MAX_ST_HEADER = 100 << 20   # WA_ST_MAX_HEADER: the safetensors library's bound on the header

# a JSON token outside a string: a string, a bracket, or the run of a number or a literal
_JSON_TOKENS = {bytes: re.compile(rb'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]|[^\s\[\]{}",:]+', re.S),
                str: re.compile(r'"(?:[^"\\]|\\.)*"?|[\[{]|[\]}]|[^\s\[\]{}",:]+', re.S)}


def _json_object(pairs):
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise ValueError('the key "%s" twice in one object' % k[:64])
        seen.add(k)
    return dict(pairs)


def _json_not_a_number(word):
    raise ValueError("%s is not JSON" % word)


def load_json(text):
    """text (str or bytes) as the library's JSON reader takes it: values nested at most
    JSON_DEPTH deep (found by a scan first, so that no input reaches Python's recursion limit)
    and each key once in an object (Python's json would keep the last), no NaN or Infinity
    (not JSON); ValueError otherwise."""
    depth = 0
    for m in _JSON_TOKENS[type(text)].finditer(text):
        c = m.group()[:1]
        if c in ("]", b"]", "}", b"}"):
            depth -= 1
            continue
        if depth > JSON_DEPTH:
            raise ValueError("nesting deeper than %d at byte %d" % (JSON_DEPTH, m.start()))
        if c in ("[", b"[", "{", b"{"):
            depth += 1
    return json.loads(text, object_pairs_hook=_json_object, parse_constant=_json_not_a_number)


def read_json_file(path):
    """A JSON file of the checkpoint (the shard index), read as the library reads it."""
    try:
        size = os.path.getsize(path)
        if size > MAX_JSON:
            raise ConvertError("%s: %d bytes: more than the %d of a JSON file this reader takes" % (path, size, MAX_JSON))
        with open(path, "rb") as f:
            text = f.read()
    except OSError as e:
        raise ConvertError("%s: cannot read: %s" % (path, e.strerror or e))
    try:
        return load_json(text)
    except ValueError as e:
        raise ConvertError("%s: not valid JSON: %s" % (path, e))


def json_shown(v):
    """A JSON value as the library's messages show it (wa_json::shown)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, str):
        n = len(v.encode("utf-8", "surrogatepass"))
        if n > 48:
            return "a string of %d bytes" % n
        return '"' + "".join("\\" + c if c in '"\\' else "\\u%04x" % ord(c) if ord(c) < 0x20 else c for c in v) + '"'
    return "an array" if isinstance(v, list) else "an object"


def _u64(x):
    return isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1 << 64


def regular_file(path):
    """Whether path is a regular file (symlinks followed); ConvertError when it is something
    else that exists (a FIFO or a device would be read forever, a socket not at all)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if stat.S_ISREG(st.st_mode):
        return True
    if stat.S_ISDIR(st.st_mode):
        return False
    raise ConvertError("%s: not a regular file or a directory" % path)


# safetensors' dtypes and their widths in bits (F4 and F6 pack their elements): WA_ST_DTYPES
ST_DTYPE_BITS = {"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8,
                 "F8_E5M2FNUZ": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
                 "I32": 32, "U32": 32, "F32": 32, "F64": 64, "I64": 64, "U64": 64, "C64": 64}


def _st_bytes(shape, bits, limit):
    """shape's elements of bits each in bytes; None when they pass limit or are not whole bytes."""
    n = 1
    for d in shape:
        if d == 0:
            return 0
        if n > limit * 8 // d:
            return None
        n *= d
    if n > limit * 8 // bits or n * bits % 8:
        return None
    return n * bits // 8


def _st_entry(path, name, e, data_size):
    """One tensor's entry of a safetensors header, checked: (dtype, shape, begin, end)."""
    where = "%s: tensor '%s'" % (path, name)
    if not isinstance(e, dict):
        raise ConvertError("%s: its entry is %s, not an object" % (where, json_shown(e)))
    bits, dtype, shape, offsets = 0, None, None, None
    for k, v in e.items():
        if k == "dtype" and isinstance(v, str):
            bits = ST_DTYPE_BITS.get(v, 0)
            if not bits:
                raise ConvertError("%s: dtype %s is not one of safetensors'" % (where, json_shown(v)))
            dtype = v
        elif k == "shape" and isinstance(v, list):
            for d in v:
                if not _u64(d):
                    raise ConvertError("%s: shape holds %s, not a size" % (where, json_shown(d)))
            shape = tuple(v)
        elif k == "data_offsets" and isinstance(v, list) and len(v) == 2 and all(_u64(x) for x in v):
            offsets = v
        elif k in ("dtype", "shape", "data_offsets"):
            raise ConvertError("%s: %s is not what safetensors stores there" % (where, k))
        else:
            raise ConvertError('%s: an unknown field "%s" (its entry holds dtype, shape and data_offsets)'
                               % (where, k[:64]))
    if not bits or shape is None or offsets is None:
        raise ConvertError("%s: no %s" % (where, "dtype" if not bits else "shape" if shape is None else "data_offsets"))
    b, e_ = offsets
    if b > e_ or e_ > data_size:
        raise ConvertError("%s: data_offsets [%d, %d] %s the %d bytes of data: truncated?"
                           % (where, b, e_, "run backwards in" if b > e_ else "lie outside", data_size))
    if _st_bytes(shape, bits, data_size) != e_ - b:
        raise ConvertError("%s: shape [%s] of %s does not fill its data_offsets [%d, %d] (%d bytes)"
                           % (where, ", ".join(str(d) for d in shape), dtype, b, e_, e_ - b))
    return dtype, shape, b, e_


def _st_check_tiling(path, tensors, data_size):
    """The tensors' data must tile the data section: no overlap, no byte that belongs to no tensor."""
    order = sorted(tensors.items(), key=lambda kv: (kv[1][2], kv[1][3]))
    pos, prev = 0, None
    for name, (_, _, b, e) in order:
        if b < pos:
            raise ConvertError("%s: tensors '%s' and '%s' overlap (data bytes [%d, %d) and [%d, %d))"
                               % (path, prev[0], name, prev[1][2], pos, b, e))
        if b > pos:
            raise ConvertError("%s: data bytes [%d, %d) before tensor '%s' belong to no tensor" % (path, pos, b, name))
        pos, prev = e, (name, tensors[name])
    if pos != data_size:
        raise ConvertError("%s: %d bytes after the last tensor's data belong to no tensor" % (path, data_size - pos))


class SafetensorsFile:
    """A safetensors file: its header, every entry checked, and its data's tiling (wa_st_open)."""
    def __init__(self, path):
        self.path = path
        self.size = os.path.getsize(path)
        if self.size < 8:
            raise ConvertError("%s: %d bytes: too short for a safetensors file" % (path, self.size))
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > self.size - 8 or n > MAX_ST_HEADER:
                raise ConvertError("%s: a safetensors header of %d bytes, in a file of %d (at most %d): not a "
                                   "safetensors file, or truncated" % (path, n, self.size, MAX_ST_HEADER))
            text = f.read(n)
        try:
            header = load_json(text.decode("utf-8"))
        except ValueError as e:
            raise ConvertError("%s: bad safetensors header: %s" % (path, e))
        if not isinstance(header, dict):
            raise ConvertError("%s: the safetensors header is %s, not an object" % (path, json_shown(header)))
        self.data_start = 8 + n
        data_size = self.size - self.data_start
        self.tensors = {}
        for name, info in header.items():
            if name == "__metadata__":
                if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                    raise ConvertError("%s: __metadata__ is not an object of strings" % path)
                continue
            self.tensors[name] = _st_entry(path, name, info, data_size)
        _st_check_tiling(path, self.tensors, data_size)

    def read(self, name):
        dtype, shape, b, e = self.tensors[name]
        with open(self.path, "rb") as f:
            f.seek(self.data_start + b)
            data = f.read(e - b)
        if len(data) != e - b:
            raise ConvertError("%s: tensor %s is truncated" % (self.path, name))
        return data


def open_checkpoint(d):
    """{tensor name: SafetensorsFile} for model.safetensors or a sharded index: each shard a file
    of the directory, each tensor in the shard the index names and in no other."""
    single = os.path.join(d, "model.safetensors")
    index = os.path.join(d, "model.safetensors.index.json")
    if regular_file(single):
        st = SafetensorsFile(single)
        return {k: st for k in st.tensors}
    if regular_file(index):
        doc = read_json_file(index)
        weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(weight_map, dict):
            raise ConvertError('%s: no "weight_map" object of tensor name -> shard file' % index)
        files, where = {}, {}
        for name, fn in weight_map.items():
            if not isinstance(fn, str) or fn in ("", ".", "..") or "/" in fn or "\0" in fn:
                raise ConvertError("%s: weight_map gives tensor '%s' the shard %s: not a file name in the directory"
                                   % (index, name, json_shown(fn)))
            if fn not in files:
                p = os.path.join(d, fn)
                if not os.path.lexists(p):
                    raise ConvertError("%s: shard %s, which the index names, is missing" % (d, fn))
                if not regular_file(p):
                    raise ConvertError("%s: not a regular file" % p)
                files[fn] = SafetensorsFile(p)
            if name not in files[fn].tensors:
                raise ConvertError("%s: tensor '%s' is not in shard %s, as the index says" % (d, name, fn))
            where[name] = files[fn]
        for fn, st in files.items():       # and each shard holds what the index says it does
            for name in st.tensors:
                if where.get(name) is not st:
                    raise ConvertError("%s: shard %s holds tensor '%s', which the index %s"
                                       % (d, fn, name, "does not name" if name not in where else "puts in another shard"))
        return where
    if any(fn.endswith((".bin", ".pt", ".pth", ".ckpt")) for fn in os.listdir(d)):
        raise ConvertError("%s: no model.safetensors (PyTorch pickles are not read: save it again with "
                           "save_pretrained(..., safe_serialization=True))" % d)
    raise ConvertError("%s: no model.safetensors or model.safetensors.index.json" % d)


ABSENT = object()                   # a key config.json does not have (null is a value it has)


def json_at(obj, path, missing=None):
    """The value at a dotted path of objects in obj ("": obj itself), `missing` where a step is missing."""
    for step in path.split(".") if path else ():
        if not isinstance(obj, dict) or step not in obj:
            return missing
        obj = obj[step]
    return obj


def shown(v):
    """A config value as a message shows it, as the library's shows it: JSON's text of a number, true, false,
    null or a short string; what an array, an object or a long string is."""
    if v is ABSENT:
        return "absent"
    if isinstance(v, (list, dict)):
        return "an array" if isinstance(v, list) else "an object"
    if isinstance(v, str) and len(v.encode("utf-8", "surrogatepass")) > 48:
        return "a string of %d bytes" % len(v.encode("utf-8", "surrogatepass"))
    return json.dumps(v, ensure_ascii=False)


def runs_as(v, want):
    """Whether a setting's value is WA_HF_SETTINGS' `runs` (the text of a string, true/false or a number)."""
    if want in ("true", "false", "null"):
        return v is {"true": True, "false": False, "null": None}[want]
    if re.match(r"-?\d", want):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v == float(want)
    return v == want


def read_config_json(d, p, what):
    """A config.json of checkpoint d, read as the library reads it (load_json's checks)."""
    try:
        with open(p, "rb") as f:
            return load_json(f.read())
    except (OSError, ValueError) as e:
        raise ConvertError("%s: unreadable %s: %s" % (d, what, e))


def f32_finite(x):
    """Whether x stays finite as the float32 a GGUF key holds."""
    try:
        struct.pack("<f", x)
        return True
    except OverflowError:
        return False


def realtime_tekken(d, left, delay):
    """Voxtral Realtime's processor's padding from tekken.json (its mistral_common tokenizer) beside config.json:
    audio.streaming_n_left_pad_tokens, and the tokens of audio.transcription_delay_ms (AudioConfig's
    get_num_delay_tokens: its samples as mel frames, 8 a token); (left, delay) as given where it says none."""
    p = os.path.join(d, "tekken.json")
    if not regular_file(p):
        return left, delay
    t = read_config_json(d, p, "tekken.json")
    audio = t.get("audio") if isinstance(t, dict) else None
    if audio is None:
        return left, delay
    if not isinstance(audio, dict):
        raise ConvertError("%s: tekken.json: audio is %s, not an object" % (d, shown(audio)))
    for key, want in (("sampling_rate", SAMPLE_RATE), ("frame_rate", 12.5)):
        v = audio.get(key, want)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != want:
            raise ConvertError("%s: tekken.json: audio.%s is %s; whisper-audio runs %s (1280 samples a token)"
                               % (d, key, shown(v), want))
    n = audio.get("streaming_n_left_pad_tokens", left)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1000:
        raise ConvertError("%s: tekken.json: audio.streaming_n_left_pad_tokens is %s, expected an integer in [1, 1000]"
                           % (d, shown(n)))
    ms = audio.get("transcription_delay_ms")
    if ms is not None:
        if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 < ms <= 60000:
            raise ConvertError("%s: tekken.json: audio.transcription_delay_ms is %s, expected a number in (0, 60000]"
                               % (d, shown(ms)))
        samples = int(ms / 1000.0 * SAMPLE_RATE)
        frames = math.ceil(samples / HOP - 1) if samples % HOP else samples // HOP
        delay = math.ceil(frames / 8)
    return n, delay


def read_config(d):
    """The hyperparameters from config.json, as the library's directory reader takes them: the encoder's by
    WA_HF_TOWERS' keys, the settings of WA_HF_SETTINGS, then what a tower reads its own way."""
    if not os.path.isdir(d):
        raise ConvertError("%s: not a directory" % d)
    p = os.path.join(d, "config.json")
    if not regular_file(p):
        raise ConvertError("%s: no config.json: not a Hugging Face checkpoint directory" % d)
    top = read_config_json(d, p, "config.json")
    mt = top.get("model_type", ABSENT) if isinstance(top, dict) else None
    if not isinstance(mt, str) or mt not in TOWERS:
        raise ConvertError("%s: config.json: model_type is %s, not \"whisper\" or an audio LLM's (%s)"
                           % (d, "absent (not an object)" if not isinstance(top, dict) else shown(mt),
                              ", ".join(t for t in TOWERS if TOWERS[t]["projector"])))
    t = TOWERS[mt]
    # the encoder's config: a path of objects in config.json, or a config.json of its own
    where, fname = "", "config.json"
    if "/" in t["encoder"]:
        wp = os.path.join(d, t["encoder"])
        if not regular_file(wp):
            raise ConvertError("%s: %s: no %s (its Whisper encoder's directory)" % (d, mt, t["encoder"]))
        cfg, fname = read_config_json(d, wp, t["encoder"]), t["encoder"]
        if not isinstance(cfg, dict):
            raise ConvertError("%s: %s is %s, not an object" % (d, t["encoder"], shown(cfg)))
    else:
        cfg = top
        for step in t["encoder"].split(".") if t["encoder"] else ():
            cfg = cfg.get(step)
            if not isinstance(cfg, dict):
                raise ConvertError("%s: config.json: %s without %s %s" % (d, mt, "an" if step[0] in "aeiou" else "a", step))
        where = t["encoder"] + "." if t["encoder"] else ""

    def get(key, obj=None, at=None, hi=1 << 20, file=None):
        obj, at = (cfg, where) if obj is None else (obj, at)
        v = json_at(obj, key, ABSENT)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v <= hi:
            raise ConvertError("%s: %s: %s%s is %s, expected an integer in [1, %d]" % (d, file or fname, at, key, shown(v), hi))
        return v

    def number(obj, at, key, default):
        v = json_at(obj, key, ABSENT)
        if v is not ABSENT and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise ConvertError("%s: %s: %s%s is %s, not a number" % (d, fname, at, key, shown(v)))
        return default if v is ABSENT else v

    def runs(obj, at, key, want, file):
        v = json_at(obj, key, ABSENT)
        if v is not ABSENT and not runs_as(v, want):
            raise ConvertError("%s: %s: %s%s is %s; whisper-audio runs %s"
                               % (d, file, at, key, shown(v), want if re.match(r"-?\d|true$|false$|null$", want) else '"%s"' % want))

    n_state = get(t["d_model"], hi=HPARAM_MAX["d_model"])
    hp = HParams(n_state, get(t["layers"], hi=HPARAM_MAX["layers"]), get(t["heads"], hi=HPARAM_MAX["heads"]),
                 get(t["ffn"], hi=HPARAM_MAX["ffn"]) if t["ffn"] else 4 * n_state,   # "": OpenAI Whisper's MLP
                 get(t["mels"], hi=HPARAM_MAX["mels"]))
    if t["projector"]:
        hp.projector = t["projector"]
        hp.n_llm = get(t["llm"], top, "", HPARAM_MAX["llm"], "config.json")
    n_pos = cfg.get(t["positions"], ABSENT) if t["positions"] else ABSENT
    if n_pos is not ABSENT and not (isinstance(n_pos, int) and not isinstance(n_pos, bool) and n_pos == N_CTX):
        raise ConvertError("%s: %s: %s%s is %s; whisper-audio needs %d (30 s windows)" % (d, fname, where, t["positions"],
                                                                                         shown(n_pos), N_CTX))
    if t["activation"]:
        runs(cfg, where, t["activation"], "gelu", fname)
    for smt, inside, key, want in SETTINGS:
        if smt == mt:
            runs(*((cfg, where, key, want, fname) if inside == "encoder" else (top, "", key, want, "config.json")))

    if mt == "voxtral":    # get_audio_features: reshape(-1, intermediate_size), then linear_1, act, linear_2
        stack = hp.n_ff // hp.n_state
        if hp.n_ff % hp.n_state or N_CTX % stack or stack > 64:
            raise ConvertError("%s: config.json: %sintermediate_size %d is not the d_model %d times a divisor of %d "
                               "(at most 64)" % (d, where, hp.n_ff, hp.n_state, N_CTX))
        hp.stack_factor = stack
    if mt == "meralion2":    # speech_audio_adapter: reshape(B, T // f, C * f) of the 1500 positions
        hp.stack_factor = top.get("speech_mlp_scale_factor", 15)
        if isinstance(hp.stack_factor, bool) or not isinstance(hp.stack_factor, int) or not 0 < hp.stack_factor <= 64 \
                or N_CTX % hp.stack_factor:
            raise ConvertError("%s: config.json: speech_mlp_scale_factor is %s, not a divisor of %d in [1, 64]"
                               % (d, shown(hp.stack_factor), N_CTX))
        hp.proj_eps = MERALION_LN_EPS
    if mt == "qwen2_5_omni":   # attention and the conv stem keep to chunks of n_window * 2 frames
        n_window = get("n_window")
        hp.n_chunk = 2 * n_window
        if 2 * N_CTX % hp.n_chunk:
            raise ConvertError("%s: config.json: %sn_window %d: chunks of %d frames do not divide a window's %d"
                               % (d, where, n_window, hp.n_chunk, 2 * N_CTX))
    if mt in ("qwen3_omni_moe", "qwen3_asr"):   # the AuT (Qwen3-ASR's too): chunks of n_window * 2 frames, attention windows of n_window_infer
        n_window, n_infer = get("n_window"), get("n_window_infer")
        hp.n_chunk, hp.n_attn_window, hp.n_conv = 2 * n_window, n_infer, get("downsample_hidden_size")
        if n_infer % hp.n_chunk or n_infer > 2 * N_CTX:
            raise ConvertError("%s: config.json: %sn_window_infer %d is not a multiple of 2 x n_window %d of at most %d "
                               "frames" % (d, where, n_infer, hp.n_chunk, 2 * N_CTX))
    if mt == "musicflamingo":   # MusicFlamingoRotaryEmbedding: head_dim is d_model, max positions rope_theta
        rp = top.get("rope_parameters") or {}
        if not isinstance(rp, dict):
            raise ConvertError("%s: config.json: rope_parameters is %s, not an object" % (d, shown(rp)))
        theta, factor = rp.get("rope_theta", 1200.0), rp.get("partial_rotary_factor", 0.2)
        step, head_dim = top.get("audio_frame_step", 0.01), top.get("head_dim") or hp.n_state
        numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (theta, factor, step, head_dim))
        hp.n_time_rot = int(head_dim * factor) if numbers else 0
        if (not numbers or head_dim != hp.n_state or hp.n_time_rot < 2 or hp.n_time_rot % 2 or 2 * hp.n_time_rot > hp.n_state
                or not N_CTX // 2 <= theta <= 1e9 or not 0 < step <= 0.25):
            raise ConvertError("%s: config.json: rope_parameters %s, head_dim %s, audio_frame_step %s; whisper-audio runs "
                               "rope_type \"default\", head_dim the audio d_model %d, an even rotary width of at most d_model / 2, "
                               "rope_theta from %d, a frame step in (0, 0.25] s" % (d, shown(top.get("rope_parameters", ABSENT)),
                                                                                     shown(top.get("head_dim", ABSENT)),
                                                                                     shown(top.get("audio_frame_step", ABSENT)),
                                                                                     hp.n_state, N_CTX // 2))
        hp.time_rope_theta, hp.time_rope_step = float(theta), 4 * float(step)   # a row: conv2's and the pooling's 4 frames
    if mt == "glmasr":     # GlmAsrEncoder (RoPE on part of each head) + GlmAsrMultiModalProjector
        if hp.n_ff != GLMASR_MERGE * hp.n_state:
            raise ConvertError("%s: config.json: %sintermediate_size %d is not %d x hidden_size %d "
                               "(get_audio_features stacks %d frames into intermediate_size)"
                               % (d, where, hp.n_ff, GLMASR_MERGE, hp.n_state, GLMASR_MERGE))
        hp.stack_factor = GLMASR_MERGE
        hp.n_proj_ff = 2 * hp.n_llm
        kv = cfg.get("num_key_value_heads")
        if kv is not None and not (isinstance(kv, int) and not isinstance(kv, bool) and kv == hp.n_head):
            # grouped-query attention: the library's attention kernels take one key/value head per query head
            raise ConvertError("%s: config.json: %snum_key_value_heads is %s; whisper-audio runs one per attention head (%d)"
                               % (d, where, shown(kv), hp.n_head))
        hd = cfg.get("head_dim", ABSENT)    # GlmAsrAttention's getattr(config, "head_dim", d / heads)
        if hd is not ABSENT and not (isinstance(hd, int) and not isinstance(hd, bool) and hd == hp.n_state // hp.n_head):
            raise ConvertError("%s: config.json: %shead_dim is %s; whisper-audio runs hidden_size / num_attention_heads (%d)"
                               % (d, where, shown(hd), hp.n_state // hp.n_head))
        rp = cfg.get("rope_parameters")
        if rp is not None and not isinstance(rp, dict):
            raise ConvertError("%s: config.json: %srope_parameters is %s, not an object" % (d, where, shown(rp)))
        rp = rp or {}
        factor = number(rp, where + "rope_parameters.", "partial_rotary_factor", 1.0)
        theta = number(rp, where + "rope_parameters.", "rope_theta", 10000.0)
        head_dim = hp.n_state // hp.n_head
        rot = head_dim * factor
        hp.n_rot = int(rot) if 0 < rot < 1e9 else 0
        hp.rope_theta = float(theta)
        if hp.n_rot < 2 or hp.n_rot % 2 or hp.n_rot > head_dim or not hp.rope_theta > 0 or not f32_finite(hp.rope_theta):
            raise ConvertError("%s: config.json: %srope_parameters give %d rotary dims of %d, theta %g"
                               % (d, where, hp.n_rot, head_dim, theta))
    if mt == "minicpmo":   # get_audio_embedding: blocks of int(audio_chunk_length * 50) positions
        chunk = number(top, "", "audio_chunk_length", 1.0)
        # chunk_length <= 0: full attention, one block of the whole window
        blocks = math.trunc(chunk * MINICPMO_POSITIONS_PER_S) if chunk > 0 else N_CTX
        if not 1 <= blocks <= N_CTX:
            raise ConvertError("%s: config.json: audio_chunk_length %s gives blocks of %g positions; [1, %d] expected"
                               % (d, shown(top.get("audio_chunk_length", 1.0)), blocks, N_CTX))
        hp.n_causal = int(blocks)
    if t["projector"] == "kimiaudio":   # 4 positions stacked into kimia_adaptor_input_dim; Whisper-large-v3's 128 mels
        ad = top.get("kimia_adaptor_input_dim", ABSENT)
        if not (isinstance(ad, int) and not isinstance(ad, bool) and ad == KIMI_STACK * hp.n_state) or hp.n_mels != 128:
            raise ConvertError("%s: config.json: kimia_adaptor_input_dim %s, %s's num_mel_bins %d; whisper-audio runs "
                               "4 x d_model %d, 128 (its encoder's fixed mel count)" % (d, shown(ad), fname, hp.n_mels, hp.n_state))
        hp.stack_factor = KIMI_STACK
        eps = number(top, "", "rms_norm_eps", 1e-6)
        if not 0 < eps < 1:
            raise ConvertError("%s: config.json: rms_norm_eps is %s, not a number in (0, 1)" % (d, shown(eps)))
        hp.proj_eps = float(eps)
    if mt == "voxtral_realtime":   # VoxtralRealtimeEncoder: causal, RMSNorm, RoPE over whole heads, a sliding window
        hp.head_dim, hp.n_window = get("head_dim", hi=256), get("sliding_window", hi=65536)
        kv = cfg.get("num_key_value_heads")
        if kv is not None and not (isinstance(kv, int) and not isinstance(kv, bool) and kv == hp.n_head):
            raise ConvertError("%s: config.json: %snum_key_value_heads is %s; whisper-audio runs one per attention head (%d)"
                               % (d, where, shown(kv), hp.n_head))
        if hp.head_dim % 2:
            raise ConvertError("%s: config.json: %shead_dim %d is odd; RoPE turns pairs" % (d, where, hp.head_dim))
        rp = cfg.get("rope_parameters") or {}
        if not isinstance(rp, dict):
            raise ConvertError("%s: config.json: %srope_parameters is %s, not an object" % (d, where, shown(rp)))
        theta, eps = number(rp, where + "rope_parameters.", "rope_theta", 10000.0), number(cfg, where, "rms_norm_eps", 1e-5)
        if not (theta > 0 and f32_finite(theta)) or not 0 < eps < 1:
            raise ConvertError("%s: config.json: %srope_theta %s, rms_norm_eps %s: a positive theta and an eps in (0, 1) expected"
                               % (d, where, shown(theta), shown(eps)))
        hp.n_rot, hp.rope_theta, hp.eps = hp.head_dim, float(theta), float(eps)
        hp.stack_factor = REALTIME_STACK
        # its processor's zeros (mistral_common's AudioEncoder.pad, offline): streaming_n_left_pad_tokens before
        # the audio, and the delay's tokens + 1 + 10 after it, as tekken.json's audio settings say where it has them
        delay = get("default_num_delay_tokens", top, "", 1000, "config.json") if "default_num_delay_tokens" in top else 6
        hp.pad_left, delay = realtime_tekken(d, REALTIME_LEFT_PAD, delay)
        hp.pad_right = delay + 1 + REALTIME_BUFFER_TOKENS
    if mt == "ultravox":   # stacking, SwiGLU's width, the optional mid LayerNorm
        hp.stack_factor = get("stack_factor", top, "", 64, "config.json")
        hp.n_proj_ff = get("hidden_size", top, "", 65536, "config.json")
        if hp.n_proj_ff % 2:
            raise ConvertError("%s: config.json: hidden_size %d is odd; Ultravox's SwiGLU halves it" % (d, hp.n_proj_ff))
        ln_mid = top.get("projector_ln_mid")
        if ln_mid is not None and not isinstance(ln_mid, bool):
            raise ConvertError("%s: config.json: projector_ln_mid is %s, not true or false" % (d, shown(ln_mid)))
        hp.ln_mid = bool(ln_mid)
    if hp.n_state % hp.n_head != 0:
        raise ConvertError("%s: %s: %s%s %d is not a multiple of the %d attention heads"
                           % (d, fname, where, t["d_model"], hp.n_state, hp.n_head))
    if t["embed_positions"] == "sinusoids" and (hp.n_state % 2 or hp.n_state < 4):   # sin | cos over (d/2 - 1) steps
        raise ConvertError("%s: %s: %s%s %d: the sinusoidal positions its model computes need an even width of at least 4"
                           % (d, fname, where, t["d_model"], hp.n_state))
    hp.model_type = mt
    return hp


ENCODER_STEMS = ("conv1.weight", "conv2d1.weight", "embedder.conv1.weight")   # Whisper's, the AuT's, Voxtral Realtime's


def find_prefix(names, top_only=False):
    """The first of WA_HF_PREFIXES (encoder's, projector's) under which names hold an encoder (Whisper's
    conv1 or the AuT's conv2d1); top_only: those of a model saved alone."""
    for prefix, pprefix in PREFIXES:
        if (not top_only or not pprefix) and any(prefix + stem in names for stem in ENCODER_STEMS):
            return prefix, pprefix
    raise ConvertError("no encoder tensors: none of %s (nor conv2d1.weight under those prefixes) is in the checkpoint"
                       % ", ".join(p + "conv1.weight" for p, _ in PREFIXES))


# ---------------------------------------------------------------------------------------
# GGUF writer
# ---------------------------------------------------------------------------------------

def pad_to(n, a=GGUF_ALIGNMENT):
    return (n + a - 1) // a * a


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_kv(key, vtype, value):
    out = gguf_string(key) + struct.pack("<I", vtype)
    if vtype == GGUF_TYPE_UINT32:
        return out + struct.pack("<I", value)
    if vtype == GGUF_TYPE_FLOAT32:
        return out + struct.pack("<f", value)
    if vtype == GGUF_TYPE_STRING:
        return out + gguf_string(value)
    raise AssertionError(vtype)


def output_target(path):
    """(the file to write, whether it is written straight through) for -o path, as main has it:
    a symlink is followed (the file it points to is replaced, the link stays); a FIFO or a
    device is written straight through; a regular file or a new one gets a temporary beside it
    that is renamed over it when complete. ConvertError for a directory or a dangling link."""
    target = path
    if os.path.islink(path):
        target = os.path.realpath(path)
        if not os.path.exists(target):
            raise ConvertError("%s: a symlink that does not lead to a file" % path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target, False
    except OSError as e:
        raise ConvertError("%s: %s" % (path, e.strerror))
    if stat.S_ISDIR(st.st_mode):
        raise ConvertError("%s: is a directory" % path)
    return target, not stat.S_ISREG(st.st_mode)


def _new_file_mode():
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_gguf(path, kvs, tensors):
    """kvs: [(key, type, value)]; tensors: [(name, torch shape, ggml type, produce())] where
    produce() returns the tensor's bytes. Writes a temporary of a unique name beside path
    (mkstemp: a user's own file and a concurrent run are never touched), then renames it over
    path; a FIFO or a device (output_target) is written straight through."""
    names = [t[0] for t in tensors]
    assert len(set(names)) == len(names), "duplicate tensor names"
    header = bytearray()
    header += GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(kvs))
    for key, vtype, value in kvs:
        header += gguf_kv(key, vtype, value)
    offset = 0
    for name, shape, gtype, _ in tensors:
        assert len(name.encode()) < 64 and 1 <= len(shape) <= 4
        header += gguf_string(name) + struct.pack("<I", len(shape))
        for dim in reversed(shape):     # ggml: innermost first
            header += struct.pack("<Q", dim)
        header += struct.pack("<IQ", gtype, offset)
        offset += pad_to(tensor_nbytes(shape, gtype))
    header += b"\x00" * (pad_to(len(header)) - len(header))

    target, through = output_target(path)
    tmp = None
    total = 0
    try:
        if through:
            f = open(target, "wb")
        else:
            try:
                old_mode = stat.S_IMODE(os.stat(target).st_mode)
            except FileNotFoundError:
                old_mode = _new_file_mode()
            fd, tmp = tempfile.mkstemp(prefix=os.path.basename(target) + ".",
                                       dir=os.path.dirname(target) or ".")
            f = os.fdopen(fd, "wb")
            os.fchmod(fd, old_mode)     # the mode of the file it replaces, else the usual one
        # a line per tensor only with -v; on a terminal a progress line redrawn in place
        progress = not VERBOSE and sys.stderr.isatty()
        with f:
            f.write(header)
            for i, (name, shape, gtype, produce) in enumerate(tensors):
                data = produce()
                nbytes = tensor_nbytes(shape, gtype)
                assert len(data) == nbytes, (name, len(data), nbytes)
                check_finite(data, gtype, name)
                f.write(data)
                f.write(b"\x00" * (pad_to(nbytes) - nbytes))
                total += nbytes
                if VERBOSE:
                    log("[%3d/%3d] %-48s %-16s %s" % (i + 1, len(tensors), name,
                        "x".join(str(s) for s in reversed(shape)), GGML_TYPE_NAME[gtype]))
                elif progress:
                    sys.stderr.write("\rwriting tensors: %d/%d" % (i + 1, len(tensors)))
                    sys.stderr.flush()
            if progress and tensors:
                sys.stderr.write("\n")
        if tmp is not None:
            os.replace(tmp, target)
            tmp = None
    except OSError as e:
        if e.filename is None:          # a write error names no file: ours is the output
            e.filename = path
        raise
    finally:
        if tmp is not None:
            try:
                os.remove(tmp)
            except OSError:
                pass
    return total, len(header) + offset


def make_kvs(name, hp, outtype, extra=()):
    U, F, S = GGUF_TYPE_UINT32, GGUF_TYPE_FLOAT32, GGUF_TYPE_STRING
    if hp.projector:
        extra = (*extra, ("whisper.projector.type", S, hp.projector),
                 ("whisper.projector.embedding_length", U, hp.n_llm),
                 ("whisper.projector.stack_factor", U, hp.stack_factor),
                 ("whisper.projector.layer_norm_epsilon", F, hp.proj_eps))
    if hp.n_window:
        extra = (*extra, ("whisper.projector.pad_left_tokens", U, hp.pad_left),
                 ("whisper.projector.pad_right_tokens", U, hp.pad_right))
    if hp.n_time_rot:
        extra = (*extra, ("whisper.projector.time_rope.dimension_count", U, hp.n_time_rot),
                 ("whisper.projector.time_rope.freq_base", F, hp.time_rope_theta),
                 ("whisper.projector.time_rope.step", F, hp.time_rope_step))
    if hp.n_rot:
        extra = (*extra, ("whisper.encoder.rope.dimension_count", U, hp.n_rot),
                 ("whisper.encoder.rope.freq_base", F, hp.rope_theta))
    if hp.n_chunk:
        extra = (*extra, ("whisper.encoder.chunk_length", U, hp.n_chunk))
    if hp.n_causal:
        extra = (*extra, ("whisper.encoder.attention.causal_chunk", U, hp.n_causal))
    if hp.n_conv:
        extra = (*extra, ("whisper.encoder.conv2d.channels", U, hp.n_conv),
                 ("whisper.encoder.attention.window_length", U, hp.n_attn_window))
    if hp.n_window:
        extra = (*extra, ("whisper.encoder.attention.key_length", U, hp.head_dim),
                 ("whisper.encoder.attention.sliding_window", U, hp.n_window))
    return [
        ("general.architecture", S, "whisper"),
        ("general.name", S, name),
        ("general.file_type", U, FILE_TYPES[outtype]),
        ("general.alignment", U, GGUF_ALIGNMENT),
        *extra,
        ("whisper.encoder.context_length", U, N_CTX),
        ("whisper.encoder.embedding_length", U, hp.n_state),
        ("whisper.encoder.block_count", U, hp.n_layer),
        ("whisper.encoder.mels_count", U, hp.n_mels),
        ("whisper.encoder.attention.head_count", U, hp.n_head),
        ("whisper.encoder.feed_forward_length", U, hp.n_ff),
        ("whisper.encoder.attention.layer_norm_epsilon", F, hp.eps),
    ]


def mel_tensor(hp):
    rows = mel_filters(hp.n_mels)
    return ("mel_filters", (hp.n_mels, N_BINS), GGML_TYPE_F32,
            lambda: f64_list_to_f32_bytes([v for r in rows for v in r]))


# ---------------------------------------------------------------------------------------
# conversion of a checkpoint directory
# ---------------------------------------------------------------------------------------

def convert_dir(d, out, outtype):
    hp = read_config(d)
    t = TOWERS[hp.model_type]
    # the projector's tensors: under the first part of each of their names (multi_modal_projector., adapter., ...)
    heads = sorted({name.split(".")[0] + "." for proj, name, _, _, _ in PROJ_TENSORS if proj == hp.projector})
    if "/" in t["encoder"]:                # the encoder's checkpoint apart (Kimi-Audio's), the projector in the LLM's
        where = open_checkpoint(os.path.dirname(os.path.join(d, t["encoder"])))
        prefix, _ = find_prefix(where, top_only=True)
        llm = open_checkpoint(d)
        first = next(name for proj, name, _, _, _ in PROJ_TENSORS if proj == hp.projector)
        pprefix = "model." if "model." + first in llm else ""
        where.update({k: v for k, v in llm.items() if k.startswith(tuple(pprefix + h for h in heads))})
    else:
        where = open_checkpoint(d)
        prefix, pprefix = find_prefix(where)

    if hp.projector == "stepaudio2":       # its Adaptor's width is not in its config: linear1's rows (2048 in Step-Audio 2 mini)
        l1 = where.get(pprefix + "adapter.linear1.weight")
        shape = l1.tensors[pprefix + "adapter.linear1.weight"][1] if l1 else None
        if not shape or len(shape) != 2 or not 1 <= shape[0] <= 65536:
            raise ConvertError("%s: missing projector tensor %sadapter.linear1.weight of [1, 65536] rows" % (d, pprefix))
        hp.n_proj_ff = shape[0]
    wanted = encoder_tensors(hp) + projector_tensors(hp)
    wanted_src = set()
    tensors = []
    for name, shape, big in wanted:
        if name == "encoder.embed_positions.weight" and t["embed_positions"] != "stored":
            # not in the checkpoint: the sinusoids its model computes, or zeros where RoPE turns q and k instead
            # (GLM-ASR: they keep the file's layout, and the graph skips them)
            tensors.append((name, shape, GGML_TYPE_F32, (lambda: f64_list_to_f32_bytes(sinusoids_f32(N_CTX, hp.n_state)))
                            if t["embed_positions"] == "sinusoids" else (lambda n=numel(shape): bytes(4 * n))))
            continue
        src = prefix + hf_name(hp.projector, name[len("encoder."):]) if name.startswith("encoder.") else pprefix + name
        wanted_src.add(src)
        st = where.get(src)
        if st is None:
            raise ConvertError("%s: missing %s tensor %s" % (d, "encoder" if name.startswith("encoder.") else "projector", src))
        dtype, sshape, b, e = st.tensors[src]
        if dtype not in ST_DTYPES:
            raise ConvertError("%s: tensor %s has dtype %s (F32, F16, BF16 or F64 expected)"
                               % (d, src, dtype))
        if sshape != shape:
            raise ConvertError("%s: tensor %s has shape %s, config.json implies %s"
                               % (d, src, list(sshape), list(shape)))
        if e - b != numel(sshape) * ST_DTYPES[dtype][0]:
            raise ConvertError("%s: tensor %s: %d bytes for shape %s %s"
                               % (d, src, e - b, list(sshape), dtype))
        gtype = OUTTYPES[outtype] if big else GGML_TYPE_F32

        def produce(st=st, src=src, dtype=dtype, gtype=gtype):
            return convert_elements(st.read(src), dtype, gtype)
        tensors.append((name, shape, gtype, produce))

    # the encoder's and projector's tensors that config.json does not account for (a layer beyond its count)
    enc_heads = (prefix,) if prefix else ("conv", "layers.", "layer_norm.", "embed_positions.")
    unused = prefix + t["unused"] if t["unused"] else None      # read by no forward (Qwen2.5-Omni's audio_bos_eos_token)
    extra = [k for k in where if k.startswith(enc_heads + tuple(pprefix + h for h in heads))
             and k not in wanted_src and k != unused]
    if extra:
        raise ConvertError("%s: %d encoder tensor(s) that config.json does not describe, e.g. %s"
                           % (d, len(extra), sorted(extra)[0]))

    log("%s: d_model %d, layers %d, heads %d, ffn %d, mels %d; keys under %r%s"
        % (d, hp.n_state, hp.n_layer, hp.n_head, hp.n_ff, hp.n_mels, prefix or "(none)",
           "; projector %s to %d" % (hp.projector, hp.n_llm) if hp.projector else ""))
    tensors.append(mel_tensor(hp))
    name = os.path.basename(os.path.normpath(os.path.abspath(d)))
    return write_gguf(out, make_kvs(name, hp, outtype), tensors), len(tensors)


# ---------------------------------------------------------------------------------------
# whisper.cpp's ggml-*.bin and CTranslate2 directories: converted by the library
# ---------------------------------------------------------------------------------------
# whisper-audio's loader is the one reader of these formats (STYLE.md 14): main --save-gguf
# loads the model and writes our GGUF of it, this file's layout (keys, names, order,
# alignment), with its matrices as the loader holds them: whisper.cpp's f16 and q8_0/q5/q4
# blocks and CTranslate2's float16/bfloat16 kept, its int8/int16 dequantised to f32. So the
# GGUF gives the same output as the source, bit for bit, and --outtype does not apply.

MAIN_HINT = ("build whisper-audio's main (`make` in %s writes build/main), or name it with --main PATH "
             "or WA_MAIN=PATH" % os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def by_library(src):
    """Whether src is for the library: a file (a whisper.cpp ggml-*.bin; any model main loads),
    or a directory holding model.bin whose config.json is not a Hugging Face one (CTranslate2's
    has no model_type). A Hugging Face checkpoint stays this script's."""
    if not os.path.isdir(src):
        return os.path.exists(src)
    if not os.path.lexists(os.path.join(src, "model.bin")):
        return False
    try:
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
    except (OSError, ValueError, RecursionError):
        return True
    return not (isinstance(cfg, dict) and "model_type" in cfg)


def find_main(given):
    """main: --main PATH, else $WA_MAIN, else build/main or main in the repository above this
    script (what `make` writes)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if given or os.environ.get("WA_MAIN"):
        path = given or os.environ["WA_MAIN"]
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise ConvertError("%s (%s): not an executable file; %s" % (path, "--main" if given else "WA_MAIN", MAIN_HINT))
        return path
    for path in (os.path.join(root, "build", "main"), os.path.join(root, "main")):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ConvertError("whisper.cpp and CTranslate2 models are converted by whisper-audio's loader, and no main "
                       "was found (%s, %s): %s" % (os.path.join(root, "build", "main"), os.path.join(root, "main"),
                                                   MAIN_HINT))


def convert_by_library(main, src, out):
    """main -m src --save-gguf out; ConvertError with main's message when it fails."""
    proc = subprocess.Popen([main, "-m", src, "--save-gguf", out], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        _, err = proc.communicate()
    except BaseException:
        # Ctrl-C or SIGTERM: main holds a signal while it writes, then ends, its output whole or
        # removed; it is waited for, never killed mid-write
        proc.send_signal(signal.SIGTERM)
        proc.wait()
        raise
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if proc.returncode != 0:
        msg = next((ln for ln in reversed(lines) if ln.startswith("error: ")), lines[-1] if lines else
                   "%s exited with status %d" % (main, proc.returncode))
        raise ConvertError(msg[len("error: "):] if msg.startswith("error: ") else msg)
    for ln in lines:
        log(ln)


# ---------------------------------------------------------------------------------------
# random model (for tests and benchmarks: its embeddings mean nothing)
# ---------------------------------------------------------------------------------------

def sinusoids(length, channels, max_timescale=10000.0):
    # Whisper's positional embedding: [sin(t * inv) | cos(t * inv)] with
    # inv = exp(-ln(10000) / (channels/2 - 1) * arange(channels/2)); computed in float64
    half = channels // 2
    inc = math.log(max_timescale) / (half - 1)
    inv = [math.exp(-inc * i) for i in range(half)]
    out = []
    for t in range(length):
        out += [math.sin(t * v) for v in inv]
        out += [math.cos(t * v) for v in inv]
    return out


def sinusoids_f32(length, channels, max_timescale=10000.0):
    # Qwen2.5-Omni's SinusoidsPositionEmbedding as transformers computes it, in float32: inv =
    # exp(f32(-ln(10000) / (channels/2 - 1)) * i), t * inv rounded to float32, then sin | cos
    # (each float32 step done in float64 and rounded: within an ulp of torch's float32 kernels)
    def f32(x):
        return struct.unpack("<f", struct.pack("<f", x))[0]
    half = channels // 2
    inc = f32(-math.log(max_timescale) / (half - 1))
    inv = [f32(math.exp(f32(inc * i))) for i in range(half)]
    out = []
    for t in range(length):
        st = [f32(t * v) for v in inv]
        out += [math.sin(x) for x in st]
        out += [math.cos(x) for x in st]
    return out


def random_model(size, out, outtype, seed, init_std):
    d, n_layer, n_head, n_ff, n_mels = SIZES[size]
    hp = HParams(d, n_layer, n_head, n_ff, n_mels)
    rng_np = np.random.default_rng(seed) if np is not None else None
    rng_py = random.Random(seed)

    def normal_f32(n):
        if rng_np is not None:
            return (rng_np.standard_normal(n, dtype=np.float32) * np.float32(init_std)).tobytes()
        g = rng_py.gauss
        a = array.array("f")
        for i in range(0, n, CHUNK):
            a.extend([g(0.0, init_std) for _ in range(min(CHUNK, n - i))])
        return _bytes(a)

    def const_f32(n, v):
        return struct.pack("<f", v) * n

    tensors = []
    for name, shape, big in encoder_tensors(hp):
        n = numel(shape)
        gtype = OUTTYPES[outtype] if big else GGML_TYPE_F32
        if name.endswith("embed_positions.weight"):
            produce = (lambda: f64_list_to_f32_bytes(sinusoids(N_CTX, d)))
        elif big:       # Linear and Conv1d weights ~ N(0, init_std)
            produce = (lambda n=n, gtype=gtype: convert_elements(normal_f32(n), "F32", gtype))
        elif "layer_norm.weight" in name:
            produce = (lambda n=n: const_f32(n, 1.0))
        else:           # biases and LayerNorm biases
            produce = (lambda n=n: const_f32(n, 0.0))
        tensors.append((name, shape, gtype, produce))
    tensors.append(mel_tensor(hp))
    desc = [("general.description", GGUF_TYPE_STRING,
             "random weights (seed %d, init_std %g): for tests and benchmarks only, "
             "its embeddings mean nothing" % (seed, init_std))]
    return write_gguf(out, make_kvs("random-" + size, hp, outtype, desc), tensors), len(tensors)


# ---------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------

def check_input(path):
    """The source must be a regular file (a ggml-*.bin) or a directory: a FIFO would block."""
    try:
        st = os.stat(path)
    except OSError:
        return                          # the converters say what is missing
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
        raise ConvertError("%s: not a regular file or a directory" % path)


def input_files(src):
    """The files a conversion of src may read: src itself, or the checkpoint's own files."""
    if not os.path.isdir(src):
        return [src]
    return [os.path.join(src, fn) for fn in sorted(os.listdir(src))
            if fn.endswith((".json", ".safetensors", ".bin"))]


def check_output(out, inputs):
    """Before any work: -o must be a place to write (output_target) and none of the inputs
    (the same file by any name: a symlink or a hard link to it)."""
    target, _ = output_target(out)
    if not os.path.exists(target):
        return
    for f in inputs:
        try:
            same = os.path.samefile(target, f)
        except OSError:
            continue
        if same:
            raise ConvertError("%s: the output is the input %s; nothing was written" % (out, f))

def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Convert a Hugging Face Whisper checkpoint directory (config.json + "
                    "model.safetensors or a sharded index) to a whisper-audio GGUF file "
                    "holding the encoder and the mel bank. A whisper.cpp ggml-*.bin or a "
                    "CTranslate2 directory is converted by whisper-audio's main (--save-gguf).",
        epilog="--random SIZE writes a model of a real shape with random weights: its "
               "embeddings mean nothing; it is for tests and benchmarks only.")
    ap.add_argument("dir", nargs="?", help="HF checkpoint directory, whisper.cpp ggml-*.bin or CTranslate2 directory")
    ap.add_argument("-o", "--output", required=True, help="output .gguf path")
    ap.add_argument("--outtype", choices=sorted(OUTTYPES), default=None,
                    help="type of the matrices and conv kernels of a Hugging Face checkpoint or --random "
                         "(default f16); the rest stays f32. A ggml or CTranslate2 model keeps its own")
    ap.add_argument("--random", metavar="SIZE", choices=list(SIZES),
                    help="random weights of a real shape (%s): for tests and benchmarks only"
                         % ", ".join(SIZES))
    ap.add_argument("--seed", type=int, default=0, help="random seed for --random (default 0)")
    ap.add_argument("--init-std", type=float, default=0.02,
                    help="std of the random matrices for --random (default 0.02, as transformers)")
    ap.add_argument("--main", metavar="PATH",
                    help="whisper-audio's main, which converts ggml and CTranslate2 models (default: $WA_MAIN, "
                         "else build/main or main in the repository above this script)")
    ap.add_argument("-v", "--verbose", action="store_true", help="a line per tensor written: name, shape and type")
    args = ap.parse_args(argv)
    global VERBOSE
    VERBOSE = args.verbose
    if (args.dir is None) == (args.random is None):
        ap.error("give either a checkpoint directory or --random SIZE")

    # SIGTERM and SIGHUP end the run as Ctrl-C does: write_gguf's temporary is removed
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda n, _frame: sys.exit(128 + n))
    try:
        if args.dir is not None:
            check_input(args.dir)
        library = args.dir is not None and by_library(args.dir)
        if library and args.outtype is not None:
            raise ConvertError("--outtype %s: a whisper.cpp or CTranslate2 model keeps the types the loader holds "
                               "(so that its GGUF gives the same output, bit for bit); --outtype is for Hugging Face "
                               "checkpoints and --random" % args.outtype)
        outtype = args.outtype or "f16"
        if library:
            regular_file(os.path.join(args.dir, "model.bin") if os.path.isdir(args.dir) else args.dir)
            main_path = find_main(args.main)
        check_output(args.output, [] if args.dir is None else input_files(args.dir))
        if library:
            convert_by_library(main_path, args.dir, args.output)
            log("wrote %s (by %s --save-gguf)" % (args.output, main_path))
            return 0
        if args.random:
            (nbytes, fbytes), nt = random_model(args.random, args.output, outtype, args.seed, args.init_std)
        else:
            (nbytes, fbytes), nt = convert_dir(args.dir, args.output, outtype)
    except ConvertError as e:
        log("error: %s" % e)
        return 1
    except OSError as e:
        log("error: %s" % (e if e.filename is not None else "%s: %s" % (args.output, e)))
        return 1
    log("wrote %s: %d tensors, %d bytes of tensor data, %d bytes in all, matrices %s "
        "(general.file_type %d)%s" % (args.output, nt, nbytes, fbytes, outtype,
                                      FILE_TYPES[outtype], "" if np is not None else
                                      " [pure Python]"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
