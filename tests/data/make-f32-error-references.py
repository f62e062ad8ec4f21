#!/usr/bin/env python3
# make-f32-error-references.py - transformers' own float32 error on the cases of
# tests/data/f32_reference.py, the bound tests/python/test_f32_error.py holds the CPU backend to
# (DESIGN.md, "What correct means"): for each case, WhisperEncoder's output in float32 (its
# default attention) against its output in float64, relative L2, into tests/data/f32-error.json.
# The test computes the float64 reference itself (numpy, f32_reference.reference), so nothing
# large is committed; this script checks that reference against transformers' float64 too.
#
#   python3 tests/data/make-f32-error-references.py          (needs torch and transformers)
import json
import os
import sys

import numpy as np
import torch
import transformers
from transformers import WhisperConfig
from transformers.models.whisper.modeling_whisper import WhisperEncoder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import f32_reference as fr   # noqa: E402


def tower_errors():
    """transformers' f32 error on the towers' features references (tests/data/towers/*.features.tower.npy,
    fr.TOWERS): make-tower-references.py's own code run again with .double() left out (the same
    seeded weights, its eager attention), against the committed float64 outputs."""
    import importlib.util
    import tempfile
    spec = importlib.util.spec_from_file_location("mtr", os.path.join(fr.DATA, "make-tower-references.py"))
    mtr = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mtr)
    got = {}
    mtr.OUT = tempfile.mkdtemp()
    mtr.store = lambda name, x: got.__setitem__(name, np.asarray(x.detach().numpy() if torch.is_tensor(x) else x, np.float64))
    double_t, double_m = torch.Tensor.double, torch.nn.Module.double
    torch.Tensor.double = lambda self: self
    torch.nn.Module.double = lambda self: self
    try:
        for fn in sorted({t[0] for t in fr.TOWERS.values()}):
            getattr(mtr, fn)(mtr.load_audio())
    finally:
        torch.Tensor.double, torch.nn.Module.double = double_t, double_m
    out = {}
    for case, (_, _, _, ref_name) in fr.TOWERS.items():
        assert got[ref_name].dtype == np.float64 and torch.get_default_dtype() == torch.float32
        out[case] = {"transformers_f32": fr.rel_error(got[ref_name], fr.tower_reference(case)), "attention": "eager"}
        print(case, out[case], flush=True)
    return out


def main():
    torch.set_num_threads(2)
    out = {"_": "transformers' WhisperEncoder float32 (default attention, CPU) against float64, relative L2; "
                "made by tests/data/make-f32-error-references.py with torch %s, transformers %s"
                % (torch.__version__, transformers.__version__)}
    for case in fr.CASES:
        # transformers' WhisperEncoder takes exactly max_source_positions positions: a short case
        # is the same model with its first positional embeddings
        positions = fr.CASES[case][-1]
        cfg = {k: v for k, v in fr.config(case).items() if k not in ("architectures", "model_type")}
        enc = WhisperEncoder(WhisperConfig(**dict(cfg, max_source_positions=positions))).eval()
        w = fr.weights(case)
        w["embed_positions.weight"] = w["embed_positions.weight"][:positions]
        enc.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()})
        x = torch.from_numpy(fr.mel(case))
        with torch.no_grad():
            f32 = enc(x).last_hidden_state.numpy()
            f64 = enc.double()(x.double()).last_hidden_state.numpy()
        ref = fr.reference(case)
        check = fr.rel_error(ref, f64)
        assert check < 1e-12, (case, check)
        out[case] = {"transformers_f32": fr.rel_error(f32, f64), "attention": enc.config._attn_implementation}
        print(case, out[case], "numpy float64 vs transformers float64: %.1e" % check, flush=True)
    out.update(tower_errors())
    with open(os.path.join(fr.DATA, "f32-error.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
