"""Q4_K / Q5_K / Q6_K of libkazeia_dev.so vs independent references:
- dequantize vs gguf-py (gguf.quants.dequantize) on random raw blocks (random bytes, fp16
  d / dmin replaced by sane random values): identical floats;
- the reference quantizers vs llama.cpp (llama-cpp-python's llama_model_quantize, `pure`, on a
  tiny F32 GGUF written by kz-mkmodel): byte match rate per type. llama.cpp's build may contract
  the searches' a*b+c into FMAs (ours never does), so an occasional block can differ by a level;
  the test asserts >= 99% identical blocks and that differing blocks dequantize close;
- dequant(quant(x)) error bounds (rel RMSE) on gaussian rows.
"""
import ctypes
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, quants

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("KZ_BUILD", "build")
LIB = BUILD / "libkazeia_dev.so"

TYPES = {"Q4_K": (12, 144, QT.Q4_K, 15), "Q5_K": (13, 176, QT.Q5_K, 17), "Q6_K": (14, 210, QT.Q6_K, 18)}
# (kz type id, block bytes, gguf type, llama ftype whose pure mix is that type)
DOFF = {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}  # fp16 scale offsets in a block


@pytest.fixture(scope="module")
def lib():
    assert LIB.exists(), f"{LIB} not found: build it first (make BUILD=...)"
    L = ctypes.CDLL(str(LIB))
    L.kz_quant_row.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.kz_quant_row.restype = ctypes.c_size_t
    L.kz_dequant_row.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.kz_dequant_row.restype = ctypes.c_int
    return L


def kz_quant(lib, t, x):
    x = np.ascontiguousarray(x, dtype=np.float32).ravel()
    tid, bb = TYPES[t][:2]
    out = np.zeros(x.size // 256 * bb, dtype=np.uint8)
    assert lib.kz_quant_row(tid, x.ctypes.data, out.ctypes.data, x.size) == out.size
    return out


def kz_dequant(lib, t, b, n):
    b = np.ascontiguousarray(b, dtype=np.uint8)
    out = np.zeros(n, dtype=np.float32)
    assert lib.kz_dequant_row(TYPES[t][0], b.ctypes.data, out.ctypes.data, n) == 0
    return out


@pytest.mark.parametrize("t", list(TYPES))
def test_dequant_vs_gguf(lib, t):
    rng = np.random.default_rng(11)
    bb = TYPES[t][1]
    nb = 301
    raw = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)
    for off in DOFF[t]:
        d = (rng.standard_normal(nb) * 0.05).astype(np.float16)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(nb, 2)
    ref = quants.dequantize(raw.ravel(), TYPES[t][2]).astype(np.float32).ravel()
    ours = kz_dequant(lib, t, raw.ravel(), nb * 256)
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    bad = np.flatnonzero(ours.view(np.uint32) != ref.view(np.uint32))
    assert bad.size == 0, f"{t}: {bad.size} of {ours.size} dequantized values differ, first at {bad[:5]}"


@pytest.mark.parametrize("t,bound", [("Q4_K", 0.115), ("Q5_K", 0.058), ("Q6_K", 0.03)])
def test_roundtrip_error(lib, t, bound):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal(256 * 199) * np.repeat(10.0 ** rng.uniform(-3, 3, 199), 256)).astype(np.float32)
    y = kz_dequant(lib, t, kz_quant(lib, t, x), x.size)
    xb, yb = x.reshape(-1, 256).astype(np.float64), y.reshape(-1, 256).astype(np.float64)
    rel = np.sqrt(((xb - yb) ** 2).sum(1) / (xb ** 2).sum(1))
    print(f"{t}: gaussian rel RMSE per block mean {rel.mean():.4f} max {rel.max():.4f}")
    assert rel.max() < bound and rel.mean() > bound / 10


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory):
    mk = BUILD / "kz-mkmodel"
    assert mk.exists(), f"{mk} not found"
    p = tmp_path_factory.mktemp("kq") / "qwen3-f32.gguf"
    subprocess.run([mk, "--arch", "qwen3", "--type", "f32", "--n-vocab", "1024", "-q", "-o", p], check=True)
    return p


@pytest.mark.parametrize("t", list(TYPES))
def test_quant_vs_llamacpp(lib, f32_model, t, tmp_path):
    import llama_cpp
    out = tmp_path / f"{t}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = TYPES[t][3]
    params.pure = True
    params.nthread = 1
    assert llama_cpp.llama_model_quantize(str(f32_model).encode(), str(out).encode(), ctypes.byref(params)) == 0
    src = {tt.name: tt for tt in GGUFReader(str(f32_model)).tensors}
    n_blocks = n_same = n_tensors = 0
    worst = 0.0
    for tt in GGUFReader(str(out)).tensors:
        if tt.tensor_type != TYPES[t][2]:
            continue
        n_tensors += 1
        x = np.asarray(src[tt.name].data, dtype=np.float32).ravel()
        ours = kz_quant(lib, t, x).reshape(-1, TYPES[t][1])
        theirs = np.asarray(tt.data, dtype=np.uint8).reshape(-1, TYPES[t][1])
        same = (ours == theirs).all(axis=1)
        n_blocks += same.size
        n_same += int(same.sum())
        if not same.all():
            a = kz_dequant(lib, t, ours.ravel(), x.size).reshape(-1, 256)[~same]
            b = kz_dequant(lib, t, theirs.ravel(), x.size).reshape(-1, 256)[~same]
            xs = x.reshape(-1, 256)[~same]
            worst = max(worst, float(np.max(np.abs(a - b).max(1) / np.abs(xs).max(1))))
    rate = n_same / n_blocks
    print(f"{t}: {n_tensors} tensors, {n_same}/{n_blocks} blocks byte-identical to llama.cpp ({rate:.4%}), "
          f"differing blocks: max |diff| / max|x| = {worst:.3g}")
    assert n_tensors >= 8
    assert rate >= 0.99, f"{t}: only {rate:.2%} of blocks match llama.cpp"
    assert worst < 0.2
