#!/usr/bin/env python3
"""Engine logits vs transformers on the exported default model, on held-out tokens.

    python3 training/check_engine.py HF_DIR MODEL.gguf [--tokens STATE/tokens/heldout.u16] [-n 256]

Runs `kazeia logits` (first n-4 tokens as one prefill, the last 4 one at a time, F32 KV cache)
and transformers' Qwen3_5ForCausalLM (float32, eager attention) on the same n held-out tokens;
prints the per-position relative error ||a-b||/||b|| (max, mean) and the top-1 agreement.
--max-rel makes it a check (exit 1 above it, or when top-1 agreement < --min-top1).
"""
import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("gguf")
    ap.add_argument("--tokens", default="/work/train-state/tokens/heldout.u16")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--offset", type=int, default=1000)
    ap.add_argument("--max-rel", type=float, default=None)
    ap.add_argument("--min-top1", type=float, default=1.0)
    ap.add_argument("--kazeia", default=str(Path(__file__).resolve().parent.parent / "build" / "kazeia"))
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    toks = np.fromfile(a.tokens, dtype=np.uint16)[a.offset:a.offset + a.n].astype(np.int64)
    from transformers import Qwen3_5ForCausalLM
    hf = Qwen3_5ForCausalLM.from_pretrained(a.hf_dir, dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        ref = hf(input_ids=torch.from_numpy(toks)[None]).logits[0].numpy()
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "logits.bin"
        subprocess.run([a.kazeia, "logits", "-m", a.gguf, "--tokens", ",".join(map(str, toks)), "--kv", "f32",
                        "--prefill", str(len(toks) - 4), "-t", "2", "-o", str(out)], check=True,
                       capture_output=True)
        got = np.fromfile(out, dtype=np.float32)
    got = got.reshape(len(toks), -1)[:, :ref.shape[1]]
    rel = np.linalg.norm(got.astype(np.float64) - ref, axis=1) / np.linalg.norm(ref.astype(np.float64), axis=1)
    top1 = float(np.mean(got.argmax(1) == ref.argmax(1)))
    print(f"{a.gguf}: {len(toks)} tokens, rel err max {rel.max():.2e} mean {rel.mean():.2e}, top-1 agreement {top1:.4f}")
    if a.max_rel is not None and (rel.max() > a.max_rel or top1 < a.min_top1):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
