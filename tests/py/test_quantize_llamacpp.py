"""`kazeia quantize` against llama.cpp's own quantizer (llama_cpp.llama_model_quantize, the
llama-quantize library call) on the same random F16 models (qwen35 with an MTP block and an
untied head, qwen3), for Q4_0, Q8_0, Q4_K_M and IQ4_NL, without and with an importance matrix
(a GGUF in llama-imatrix's layout, written here with gguf-py; llama.cpp gets the same
importance as llama-quantize computes it: in_sum2 / counts in float32):
- the tensor list, order and the type chosen for every tensor are identical;
- every tensor's bytes are identical (the same algorithm for every type here), and so is the
  whole file (metadata, general.file_type, alignment);
- our output loads and runs in llama.cpp and in ours, with close logits.
"""
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

import kzutil

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("KZ_BUILD", "build")
FTYPES = {"Q4_0": 2, "Q8_0": 7, "Q4_K_M": 15, "IQ4_NL": 25}
TOKENS = [5, 77, 301, 12, 499, 260]
# ours vs llama.cpp logits on one of our quantised files (kzutil.BOUNDS_LCPP's quantised rows)
MAX_REL = 6e-2


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("quantize")


def mkmodel(tmp, arch):
    p = tmp / f"{arch}-f16.gguf"
    extra = ["--nextn", "1"] if arch == "qwen35" else []
    subprocess.run([BUILD / "kz-mkmodel", "--arch", arch, "--type", "f16", "--n-embd", "256", "--n-ff", "512",
                    "--untied", "--seed", "11", "-q", "-o", p] + extra, check=True)
    return p


@pytest.fixture(scope="module")
def models(tmp):
    return {a: mkmodel(tmp, a) for a in ("qwen35", "qwen3")}


def write_imatrix(src, path, skip):
    """llama-imatrix's layout: W.in_sum2 F32 [n_per_row, 1], W.counts F32 [1, 1], sorted;
    random positive sums for every 2-D weight except `skip` (quantised without, in both)."""
    import gguf
    rng = np.random.default_rng(3)
    r = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(path), arch="unused")
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["random.txt"])
    w.add_uint32("imatrix.chunk_count", 4)
    w.add_uint32("imatrix.chunk_size", 512)
    imp = {}
    for t in sorted(r.tensors, key=lambda t: t.name):
        ne = [int(x) for x in t.shape]
        if len([x for x in ne if x > 1]) < 2 or not t.name.endswith(".weight") or t.name == skip:
            continue
        count = 2048.0
        s = (rng.gamma(0.8, 1.0, size=ne[0]) * count).astype(np.float32)
        w.add_tensor(t.name + ".in_sum2", s.reshape(1, ne[0]))
        w.add_tensor(t.name + ".counts", np.array([[count]], dtype=np.float32))
        imp[t.name] = (s / np.float32(count)).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return imp


def llama_quantize(src, out, ftype, imp=None):
    assert kzutil.lc_quantize(src, out, ftype, imp) == 0


@pytest.mark.parametrize("with_imatrix", [False, True], ids=["plain", "imatrix"])
@pytest.mark.parametrize("qtype", list(FTYPES))
@pytest.mark.parametrize("arch", ["qwen35", "qwen3"])
def test_same_types_and_bytes(tmp, models, arch, qtype, with_imatrix):
    src = models[arch]
    imp = None
    cmd = [BUILD / "kazeia", "quantize", "-q", "-t", "2"]
    tag = f"{arch}-{qtype}-{'im' if with_imatrix else 'plain'}"
    if with_imatrix:
        imf = tmp / f"{arch}.imatrix.gguf"
        imp = write_imatrix(src, imf, skip="blk.1.ffn_up.weight")
        cmd += ["--imatrix", imf]
    ours, theirs = tmp / f"{tag}-ours.gguf", tmp / f"{tag}-llama.gguf"
    kzutil.run(cmd + [src, ours, qtype])
    llama_quantize(src, theirs, FTYPES[qtype], imp)
    kv_o, t_o = kzutil.read_gguf(ours)
    kv_t, t_t = kzutil.read_gguf(theirs)
    assert list(t_o) == list(t_t), "tensor order differs"
    types_o = {n: t[0] for n, t in t_o.items()}
    types_t = {n: t[0] for n, t in t_t.items()}
    diff = {n: (types_o[n], types_t[n]) for n in types_o if types_o[n] != types_t[n]}
    assert not diff, f"{tag}: tensor types differ (ours, llama.cpp): {diff}"
    bad = [n for n in t_o if not np.array_equal(t_o[n][2], t_t[n][2])]
    assert not bad, f"{tag}: {len(bad)} tensors differ in bytes, e.g. {bad[:4]}"
    assert kv_o["general.file_type"] == FTYPES[qtype] and kv_o["general.quantization_version"] == 2
    assert ours.read_bytes() == theirs.read_bytes(), f"{tag}: files differ outside the tensor data"
    kinds = sorted({int(t) for t in types_o.values()})
    print(f"{tag}: {len(t_o)} tensors identical in type and bytes, types used {kinds}")
    if with_imatrix:  # the importance was used: the file differs from the plain one's
        plain = tmp / f"{tag}-plain.gguf"
        kzutil.run([BUILD / "kazeia", "quantize", "-q", src, plain, qtype])
        assert (plain.read_bytes() != ours.read_bytes()) == (qtype != "Q8_0")


@pytest.mark.parametrize("qtype", ["Q4_K_M", "IQ4_NL"])
@pytest.mark.parametrize("arch", ["qwen35", "qwen3"])
def test_output_runs_in_both(tmp, models, arch, qtype):
    out = tmp / f"{arch}-{qtype}-run.gguf"
    kzutil.run([BUILD / "kazeia", "quantize", "-q", models[arch], out, qtype])
    ours = kzutil.kz_logits(out, TOKENS, n_vocab=512)
    theirs = kzutil.lc_logits(out, TOKENS)[:, :512]
    assert np.isfinite(ours).all() and np.isfinite(theirs).all()
    rel = kzutil.rel_err(ours, theirs)
    print(f"{arch} {qtype}: ours vs llama.cpp on our file, max rel {rel.max():.3g}")
    assert rel.max() < MAX_REL
