#!/usr/bin/env python3
"""What each quantisation type costs the default model: file size, perplexity, mean KL
divergence and top-1 agreement against the F16 file, for kazeia's quantizer and llama.cpp's
(llama-cpp-python's `llama_model_quantize`) side by side, both files scored by `kazeia
perplexity` on the same held-out text (llama-perplexity's method and KLD file format).

    python3 training/quant_table.py HF_DIR HELDOUT.txt CALIB.txt [--work DIR] [--ctx 256]

HF_DIR: the exported checkpoint (training/export.py); CALIB: imatrix calibration text (training
text, never the held-out). Prints a Markdown table; tensors byte-identical between the two
quantizers are counted per row.
"""
import argparse
import re
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "py"))
import kzutil  # noqa: E402  (llama.cpp's quantizer through llama-cpp-python)
KZ = ROOT / "build" / "kazeia"
# name -> llama.cpp's llama_ftype
ROWS = [("F16", 1, False), ("Q8_0", 7, False), ("Q6_K", 18, False), ("Q5_K_M", 17, False),
        ("Q4_K_M", 15, False), ("IQ4_NL", 25, False), ("IQ4_NL", 25, True), ("Q4_0", 2, False)]


def sh(*args):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"failed: {' '.join(map(str, args))}\n{p.stdout[-1500:]}\n{p.stderr[-2500:]}")
    return p.stdout + p.stderr


def imatrix_values(path):
    """llama-imatrix GGUF -> {tensor: in_sum2 / counts} (what llama-quantize gives its quantizers)"""
    import gguf
    r = gguf.GGUFReader(str(path))
    t = {x.name: np.asarray(x.data, dtype=np.float32).reshape(-1) for x in r.tensors}
    return {n[:-len(".in_sum2")]: t[n] / t[n[:-len(".in_sum2")] + ".counts"][0]
            for n in t if n.endswith(".in_sum2")}


def llama_quantize(src, out, ftype, imp=None):
    if kzutil.lc_quantize(src, out, ftype, imp) != 0:
        sys.exit(f"llama.cpp quantize {out} failed")


def same_tensors(a, b):
    import gguf
    ra, rb = gguf.GGUFReader(str(a)), gguf.GGUFReader(str(b))
    tb = {t.name: t for t in rb.tensors}
    same = sum(1 for t in ra.tensors if t.name in tb and t.tensor_type == tb[t.name].tensor_type
               and np.array_equal(np.asarray(t.data).view(np.uint8), np.asarray(tb[t.name].data).view(np.uint8)))
    return same, len(ra.tensors)


def kld(model, base):
    out = sh(KZ, "perplexity", "-m", model, "--kl-divergence", base, "-t", 2)

    def num(label):
        m = re.search(re.escape(label) + r"\s*:\s*([-0-9.eE+]+)(?:\s*±\s*([-0-9.eE+]+))?", out)
        if not m:
            sys.exit(f"{label} not in:\n{out}")
        return float(m.group(1)), float(m.group(2) or 0)
    return {"ppl": num("Mean PPL(Q)"), "kld": num("Mean    KLD"), "top": num("Same top p")}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("hf_dir")
    ap.add_argument("heldout")
    ap.add_argument("calib")
    ap.add_argument("--work", default="/tmp/kz-quant-table")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--calib-chunks", type=int, default=100)
    a = ap.parse_args(argv)
    w = Path(a.work)
    w.mkdir(parents=True, exist_ok=True)
    f16 = w / "f16.gguf"
    sh(sys.executable, ROOT / "tools" / "convert_hf.py", a.hf_dir, f16, "--type", "f16")
    imat = w / "imatrix.gguf"
    sh(KZ, "imatrix", "-m", f16, "-f", a.calib, "-o", imat, "-c", a.ctx, "--chunks", a.calib_chunks, "-t", 2)
    imp = imatrix_values(imat)
    base = w / "f16.kld"
    sh(KZ, "perplexity", "-m", f16, "-f", a.heldout, "-c", a.ctx, "--kl-divergence-base", base, "-t", 2)

    rows = []
    for name, ftype, with_im in ROWS:
        tag = name.lower() + ("-imat" if with_im else "")
        ours, lc = w / f"kz-{tag}.gguf", w / f"lc-{tag}.gguf"
        if name == "F16":
            ours = lc = f16
        else:
            sh(KZ, "quantize", *(["--imatrix", imat] if with_im else []), f16, ours, name)
            llama_quantize(f16, lc, ftype, imp if with_im else None)
        r_ours, r_lc = kld(ours, base), kld(lc, base)
        same, n = same_tensors(ours, lc)
        rows.append((name + (" + imatrix" if with_im else ""), ours.stat().st_size, lc.stat().st_size, r_ours, r_lc,
                     same, n))
        print(f"{rows[-1][0]}: done", file=sys.stderr, flush=True)

    def f(x, d):
        return f"{x[0]:.{d}f} ± {x[1]:.{d}f}" if x[1] else f"{x[0]:.{d}f}"
    print("| type | file MB (kazeia / llama.cpp) | PPL kazeia | PPL llama.cpp | mean KLD kazeia | mean KLD llama.cpp "
          "| top-1 % kazeia | top-1 % llama.cpp | tensors byte-identical |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, sz_o, sz_l, o, l, same, n in rows:
        print(f"| {name} | {sz_o / 1e6:.2f} / {sz_l / 1e6:.2f} | {f(o['ppl'], 3)} | {f(l['ppl'], 3)} | {f(o['kld'], 5)} "
              f"| {f(l['kld'], 5)} | {o['top'][0]:.2f} | {l['top'][0]:.2f} | {same} / {n} |")


if __name__ == "__main__":
    main()
