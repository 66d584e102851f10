"""Q4_1 / Q5_0 / Q5_1 / IQ4_NL of libkazeia_dev.so against independent references:
- dequantize: identical floats to gguf-py (gguf.quants.dequantize) on random blocks with random
  finite non-zero fp16 scales (and mins);
- quantize: Q4_1 / Q5_0 / Q5_1 identical bytes to gguf-py's quants.quantize; IQ4_NL (gguf-py has
  no quantizer) identical bytes to a numpy float32 port of llama-quantize's search written here;
- all four against llama.cpp itself (llama-cpp-python's llama_model_quantize on a tiny F32
  model): identical bytes on every tensor llama.cpp wrote in the requested type;
- vec_dot vs the float64 dot of the dequantized rows (weights and converted activations),
  within 1e-5 * sum|w a| plus the fp16 rounding of Q8_1's s for the min types.
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

TYPES = {"Q4_1": (3, 20, QT.Q4_1), "Q5_0": (6, 22, QT.Q5_0), "Q5_1": (7, 24, QT.Q5_1), "IQ4_NL": (20, 18, QT.IQ4_NL)}
ACT = {"Q4_1": (9, 36), "Q5_1": (9, 36), "Q5_0": (8, 34), "IQ4_NL": (8, 34)}
KV = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)


@pytest.fixture(scope="module")
def lib():
    assert LIB.exists(), f"{LIB} not found: build it first (make BUILD=...)"
    L = ctypes.CDLL(str(LIB))
    for f in ("kz_quant_row", "kz_dequant_row", "kz_act_quant", "kz_vec_dot"):
        getattr(L, f).argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.kz_quant_row.restype = ctypes.c_size_t
    L.kz_dequant_row.restype = ctypes.c_int
    L.kz_act_quant.restype = None
    L.kz_vec_dot.restype = ctypes.c_float
    return L


def kz_quant(lib, t, x):
    x = np.ascontiguousarray(x, dtype=np.float32).ravel()
    out = np.zeros(x.size // 32 * TYPES[t][1], dtype=np.uint8)
    assert lib.kz_quant_row(TYPES[t][0], x.ctypes.data, out.ctypes.data, x.size) == out.size
    return out


def kz_dequant(lib, t, b, n):
    b = np.ascontiguousarray(b, dtype=np.uint8)
    out = np.zeros(n, dtype=np.float32)
    assert lib.kz_dequant_row(TYPES[t][0], b.ctypes.data, out.ctypes.data, n) == 0
    return out


def rand_rows(rng, n_blocks):
    mag = 10.0 ** rng.uniform(-3, 3, size=(n_blocks, 1))
    x = (rng.uniform(-1, 1, size=(n_blocks, 32)) * mag).astype(np.float32)
    x[rng.random(x.shape) < 0.02] *= 8
    return x.ravel()


def rand_scales(rng, k):
    v = rng.uniform(0.01, 1, size=k) * np.exp2(rng.integers(-8, 4, size=k)) * rng.choice([-1, 1], size=k)
    return v.astype(np.float16).view(np.uint8).reshape(k, 2)


@pytest.mark.parametrize("t", list(TYPES))
def test_dequant_exact(lib, t):
    rng = np.random.default_rng(11)
    nb = 513
    _, bs, qt = TYPES[t]
    blk = rng.integers(0, 256, size=(nb, bs), dtype=np.uint8)
    blk[:, 0:2] = rand_scales(rng, nb)
    if t in ("Q4_1", "Q5_1"):
        blk[:, 2:4] = rand_scales(rng, nb)
    ref = quants.dequantize(blk.ravel(), qt).astype(np.float32).ravel()
    got = kz_dequant(lib, t, blk.ravel(), nb * 32)
    assert np.isfinite(ref).all() and np.abs(ref).max() > 0
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), f"{t}: {np.sum(got != ref)} of {ref.size} differ"


@pytest.mark.parametrize("t", ["Q4_1", "Q5_0", "Q5_1"])
def test_quant_bytes_vs_gguf(lib, t):
    rng = np.random.default_rng(5)
    x = rand_rows(rng, 2049)
    x[:32] = 0  # an all-zero block
    x[32:64] = 1.5  # a constant block
    ref = quants.quantize(x.reshape(1, -1), TYPES[t][2]).ravel()
    got = kz_quant(lib, t, x)
    nbad = int(np.sum(np.any(got.reshape(-1, TYPES[t][1]) != ref.reshape(-1, TYPES[t][1]), axis=1)))
    assert nbad == 0, f"{t}: {nbad} of {x.size // 32} blocks differ from gguf-py"


def iq4_best(v):
    """ggml's best_index_int8 on the sorted codebook, vectorised (ties to the upper value)"""
    v = v.astype(np.float32)
    hi = np.clip(np.searchsorted(KV.astype(np.float32), v, side="right"), 1, 15)
    lo = hi - 1
    # binary search semantics: lo = last index with KV[lo] <= v (v > KV[0] here)
    dlo = v - KV[lo].astype(np.float32)
    dhi = KV[hi].astype(np.float32) - v
    r = np.where(dlo < dhi, lo, hi)
    r = np.where(v <= np.float32(KV[0]), 0, r)
    return np.where(v >= np.float32(KV[15]), 15, r).astype(np.uint8)


def iq4_nl_ref(x):
    """numpy float32 port of quantize_iq4_nl (ntry = 7, no imatrix), block by block"""
    f = np.float32
    out = []
    for xb in x.reshape(-1, 32).astype(np.float32):
        w = xb * xb
        ia = int(np.argmax(np.abs(xb)))  # first occurrence of the largest |x|
        amax, mx = abs(xb[ia]), xb[ia]
        d = f(0)
        if amax >= f(1e-15):
            def fit(id_):
                q = KV[iq4_best(f(id_) * xb)].astype(np.float32)
                wq = w * q
                sqx = sq2 = f(0)
                for j in range(32):  # sequential float32 sums, as the C loop
                    sqx = f(sqx + f(wq[j] * xb[j]))
                    sq2 = f(sq2 + f(wq[j] * q[j]))
                return sqx, sq2
            d0 = f(-mx / f(KV[0]))
            sqx, sq2 = fit(f(1) / d0)
            d = f(sqx / sq2) if sq2 > 0 else f(0)
            best = f(d * sqx)
            for itry in range(-7, 8):
                sqx, sq2 = fit(f(itry + int(KV[0])) / mx)
                if sq2 > 0 and f(sqx * sqx) > f(best * sq2):
                    d = f(sqx / sq2)
                    best = f(d * sqx)
        idd = f(1) / d if d != 0 else f(0)
        L = iq4_best(idd * xb)
        qs = (L[:16] | (L[16:] << 4)).astype(np.uint8)
        out.append(np.concatenate([np.array([d], dtype=np.float16).view(np.uint8), qs]))
    return np.concatenate(out)


def test_iq4_nl_quant_vs_numpy_port(lib):
    rng = np.random.default_rng(8)
    x = rand_rows(rng, 600)
    x[:32] = 0
    ref = iq4_nl_ref(x)
    got = kz_quant(lib, "IQ4_NL", x)
    nbad = int(np.sum(np.any(got.reshape(-1, 18) != ref.reshape(-1, 18), axis=1)))
    print(f"IQ4_NL vs numpy port: {600 - nbad}/600 blocks identical")
    assert nbad == 0, f"IQ4_NL: {nbad} of 600 blocks differ from the numpy port"
    # and the dequantized result is a good fit (catches a port and a C code wrong the same way)
    y = kz_dequant(lib, "IQ4_NL", got, x.size)
    rel = np.sqrt(np.mean((y - x) ** 2) / np.mean(x ** 2))
    assert 1e-3 < rel < 0.12


@pytest.mark.parametrize("t", list(TYPES))
def test_quant_vs_llama_cpp(lib, t, tmp_path):
    import llama_cpp
    mk = BUILD / "kz-mkmodel"
    assert mk.exists(), f"{mk} not found"
    f32 = tmp_path / "f32.gguf"
    subprocess.run([mk, "--arch", "qwen3", "--type", "f32", "--seed", "3", "-q", "-o", f32], check=True)
    out = tmp_path / f"{t}.gguf"
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = {"Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "IQ4_NL": 25}[t]
    params.nthread = 1
    assert llama_cpp.llama_model_quantize(str(f32).encode(), str(out).encode(), ctypes.byref(params)) == 0
    src = {x.name: x for x in GGUFReader(str(f32)).tensors}
    n_t = n_blk = n_bad = 0
    for tq in GGUFReader(str(out)).tensors:
        if tq.tensor_type != TYPES[t][2]:
            continue
        x = np.asarray(src[tq.name].data, dtype=np.float32).ravel()
        got = kz_quant(lib, t, x)
        ref = np.asarray(tq.data).view(np.uint8).ravel()
        assert got.size == ref.size
        bs = TYPES[t][1]
        n_bad += int(np.sum(np.any(got.reshape(-1, bs) != ref.reshape(-1, bs), axis=1)))
        n_blk += got.size // bs
        n_t += 1
    print(f"{t} vs llama-quantize: {n_t} tensors, {n_blk - n_bad}/{n_blk} blocks identical")
    assert n_t >= 5 and n_blk > 1000
    assert n_bad == 0, f"{t}: {n_bad} of {n_blk} blocks differ from llama-quantize"


@pytest.mark.parametrize("t", list(TYPES))
def test_vec_dot_vs_float64(lib, t):
    rng = np.random.default_rng(21)
    at, ab = ACT[t]
    worst = 0.0
    for n in (32, 32 * 7, 32 * 33, 32 * 101):
        for _ in range(5):
            w = kz_quant(lib, t, rand_rows(rng, n // 32))
            x = rand_rows(rng, n // 32)
            a = np.zeros(n // 32 * ab, dtype=np.uint8)
            lib.kz_act_quant(TYPES[t][0], x.ctypes.data, a.ctypes.data, n)
            wd = kz_dequant(lib, t, w, n).astype(np.float64)
            ab_ = a.reshape(-1, ab)
            da = ab_[:, 0:2].copy().view(np.float16).astype(np.float64)
            qa = ab_[:, ab - 32:].copy().view(np.int8).astype(np.float64)
            ad = (da * qa).ravel()
            ref = float(np.dot(wd, ad))
            mag = float(np.sum(np.abs(wd * ad)))
            bound = 1e-5 * mag
            if t in ("Q4_1", "Q5_1"):  # s = fp16(d * sum q): 2^-11 relative per block
                m = w.reshape(-1, TYPES[t][1])[:, 2:4].copy().view(np.float16).astype(np.float64).ravel()
                bound += float(np.sum(np.abs(m) * np.abs(da.ravel() * qa.sum(axis=1)))) * 2.0 ** -11 * 1.01
            got = lib.kz_vec_dot(TYPES[t][0], w.ctypes.data, a.ctypes.data, n)
            assert abs(got - ref) <= bound, f"{t} n={n}: {got} vs {ref} (bound {bound})"
            worst = max(worst, abs(got - ref) / mag)
    print(f"{t}: max |vec_dot - float64| / sum|w a| = {worst:.2e}")


@pytest.mark.parametrize("t", list(TYPES))
def test_model_logits_vs_llama_cpp(t, tmp_path):
    """A tiny qwen3 model in type t: our logits vs llama.cpp's (plain CPU path) on the same file.
    Position 0 has no attention mixing: the same activations, the same integer sums, so the
    two agree to float summation order (bound of the other integer types: 1e-4 relative)."""
    import kzutil
    mk = BUILD / "kz-mkmodel"
    model = tmp_path / f"qwen3-{t}.gguf"
    subprocess.run([mk, "--arch", "qwen3", "--type", t.lower(), "--seed", "5", "-q", "-o", model], check=True)
    tokens = [int(v) for v in np.random.default_rng(4).integers(1, 512, size=6)]
    ours = kzutil.kz_logits(model, tokens, prefill=6, n_vocab=512)
    ref = kzutil.lc_logits(model, tokens, prefill=6)[:, :512]
    rel = kzutil.rel_err(ours, ref)
    print(f"{t} qwen3 tiny vs llama.cpp: position 0 rel {rel[0]:.3g}, max over 6 {rel.max():.3g}, "
          f"argmax agree {kzutil.top1(ours, ref):.3f}")
    assert np.isfinite(ours).all() and ours.std() > 0.1
    assert rel[0] < 1e-4, f"{t}: position 0 rel {rel[0]:.3g}"
    assert rel.max() < 4e-2
