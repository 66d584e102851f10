"""Q2_K / Q3_K / IQ4_XS against independent references:
- dequantize: gguf-py numpy dequantize, exact, on random blocks (random bytes, sane fp16 scales)
- quantize: llama.cpp's own quantizers (libggml-base from llama-cpp-python: quantize_q2_K /
  quantize_q3_K with no imatrix -> quantize_row_*_ref, quantize_iq4_xs), byte match rate
- vec_dot with Q8_K vs a float64 dot of the dequantized rows (stated relative bound)."""
import ctypes
import os
import pathlib

import numpy as np
import pytest
import gguf
from gguf.quants import dequantize

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIB = ROOT / os.environ.get("KZ_BUILD", "build") / "libkazeia_dev.so"

TYPES = {  # name: (ggml id, bytes per 256, offsets of fp16 scales in the block)
    "Q2_K": (10, 84, (80, 82)),
    "Q3_K": (11, 110, (108,)),
    "IQ4_XS": (23, 136, (0,)),
}
QT = {"Q2_K": gguf.GGMLQuantizationType.Q2_K, "Q3_K": gguf.GGMLQuantizationType.Q3_K,
      "IQ4_XS": gguf.GGMLQuantizationType.IQ4_XS}


@pytest.fixture(scope="module")
def kz():
    lib = ctypes.CDLL(str(LIB))
    lib.kz_dequant_row.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.kz_dequant_row.restype = ctypes.c_int
    lib.kz_quant_row.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.kz_quant_row.restype = ctypes.c_size_t
    lib.kz_act_quant.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.kz_act_row_bytes.argtypes = [ctypes.c_uint32, ctypes.c_int64]
    lib.kz_act_row_bytes.restype = ctypes.c_size_t
    lib.kz_vec_dot.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    lib.kz_vec_dot.restype = ctypes.c_float
    return lib


@pytest.fixture(scope="module")
def ggml():
    import llama_cpp  # noqa: F401  (must be installed: the test fails without it)
    p = pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"
    lib = ctypes.CDLL(str(p))
    for f in ("quantize_q2_K", "quantize_q3_K", "quantize_iq4_xs"):
        fn = getattr(lib, f)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
        fn.restype = ctypes.c_size_t
    return lib


def rand_blocks(rng, name, nb):
    _, bs, offs = TYPES[name]
    raw = rng.integers(0, 256, size=(nb, bs), dtype=np.uint8)
    for o in offs:
        h = (rng.uniform(0.01, 2.0, size=nb) * rng.choice([-1, 1], size=nb)).astype(np.float16)
        raw[:, o:o + 2] = h.view(np.uint8).reshape(nb, 2)
    return raw


def kz_dequant(kz, name, raw, n):
    out = np.zeros(n, dtype=np.float32)
    assert kz.kz_dequant_row(TYPES[name][0], raw.ctypes.data, out.ctypes.data, n) == 0
    return out


@pytest.mark.parametrize("name", list(TYPES))
def test_dequant_exact(kz, name):
    rng = np.random.default_rng(11 + TYPES[name][0])
    nb = 37
    raw = np.ascontiguousarray(rand_blocks(rng, name, nb))
    ref = dequantize(raw.reshape(-1), QT[name]).reshape(-1).astype(np.float32)
    got = kz_dequant(kz, name, raw, nb * 256)
    assert np.array_equal(got.view(np.uint32), ref.view(np.uint32)), \
        f"{name}: {np.sum(got != ref)} of {got.size} differ"


def kz_quant(kz, name, x):
    n = x.size
    buf = np.zeros(n // 256 * TYPES[name][1], dtype=np.uint8)
    assert kz.kz_quant_row(TYPES[name][0], x.ctypes.data, buf.ctypes.data, n) == buf.size
    return buf


@pytest.mark.parametrize("name", list(TYPES))
def test_quant_vs_llamacpp(kz, ggml, name):
    rng = np.random.default_rng(5)
    nrow, npr = 7, 256 * 5
    x = (rng.standard_normal(nrow * npr) * rng.uniform(0.1, 3.0)).astype(np.float32)
    x[::97] *= 8  # outliers
    ours = kz_quant(kz, name, x)
    ref = np.zeros_like(ours)
    fn = {"Q2_K": ggml.quantize_q2_K, "Q3_K": ggml.quantize_q3_K, "IQ4_XS": ggml.quantize_iq4_xs}[name]
    assert fn(x.ctypes.data, ref.ctypes.data, nrow, npr, None) == ref.size
    bs = TYPES[name][1]
    blocks_equal = np.mean(np.all(ours.reshape(-1, bs) == ref.reshape(-1, bs), axis=1))
    print(f"{name}: blocks byte-identical with llama.cpp: {blocks_equal:.4f}")
    # compiled llama.cpp may contract a*b+c into FMA in the searches; require near-total agreement
    assert blocks_equal >= 0.97, f"{name}: only {blocks_equal:.3f} of blocks match llama.cpp"
    # and the reconstruction error must be as good as llama.cpp's
    e_ours = np.sqrt(np.mean((dequantize(ours, QT[name]).reshape(-1) - x) ** 2))
    e_ref = np.sqrt(np.mean((dequantize(ref, QT[name]).reshape(-1) - x) ** 2))
    assert e_ours <= e_ref * 1.001 + 1e-12


@pytest.mark.parametrize("name", list(TYPES))
def test_roundtrip_rmse(kz, name):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(256 * 9).astype(np.float32)
    y = kz_dequant(kz, name, kz_quant(kz, name, x), x.size)
    rel = np.sqrt(np.mean((y - x) ** 2)) / np.sqrt(np.mean(x ** 2))
    bound = {"Q2_K": 0.40, "Q3_K": 0.22, "IQ4_XS": 0.12}[name]
    assert 0 < rel < bound, f"{name}: relative rmse {rel}"


@pytest.mark.parametrize("name", list(TYPES))
def test_vec_dot_vs_float64(kz, name):
    rng = np.random.default_rng(21)
    for k in (1, 3, 7):
        n = 256 * k
        w = rng.standard_normal(n).astype(np.float32)
        a = rng.standard_normal(n).astype(np.float32)
        wq = kz_quant(kz, name, w)
        act = np.zeros(kz.kz_act_row_bytes(TYPES[name][0], n), dtype=np.uint8)
        kz.kz_act_quant(TYPES[name][0], a.ctypes.data, act.ctypes.data, n)
        wd = kz_dequant(kz, name, wq, n).astype(np.float64)
        blk = act.reshape(-1, 292)  # Q8_K: f32 d, int8 qs[256], int16 bsums[16] (not in gguf-py)
        ad = (blk[:, 4:260].view(np.int8).astype(np.float64)
              * blk[:, 0:4].copy().view(np.float32).astype(np.float64)).reshape(-1)
        ref = float(np.dot(wd, ad))
        got = kz.kz_vec_dot(TYPES[name][0], wq.ctypes.data, act.ctypes.data, n)
        # same quantized operands: only float rounding of the per-block scaling differs
        bound = 1e-5 * float(np.sum(np.abs(wd * ad))) + 1e-6
        assert abs(got - ref) <= bound, f"{name} n={n}: {got} vs {ref}"
