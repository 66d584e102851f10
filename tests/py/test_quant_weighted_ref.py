"""Weighted (importance-matrix) quantizers of libkazeia_dev.so (kz_quant_row_w) against llama.cpp's
own ggml_quantize_chunk (libggml-base from llama-cpp-python, called through ctypes) on random rows
of odd row counts, with random positive importance and without it (imatrix NULL: llama.cpp's
unweighted path), every type: every block byte-identical.
"""
import ctypes
import os
import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIB = ROOT / os.environ.get("KZ_BUILD", "build") / "libkazeia_dev.so"

# name: (ggml id, block elements, block bytes)
TYPES = {
    "Q4_0": (2, 32, 18), "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24), "Q8_0": (8, 32, 34),
    "IQ4_NL": (20, 32, 18), "IQ4_XS": (23, 256, 136), "Q2_K": (10, 256, 84), "Q3_K": (11, 256, 110),
    "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176), "Q6_K": (14, 256, 210),
}
@pytest.fixture(scope="module")
def kz():
    assert LIB.exists(), f"{LIB} not found: make dev"
    L = ctypes.CDLL(str(LIB))
    L.kz_quant_row_w.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                                 ctypes.c_void_p]
    L.kz_quant_row_w.restype = ctypes.c_size_t
    return L


@pytest.fixture(scope="module")
def ggml():
    import llama_cpp  # noqa: F401  (must be installed: the test fails without it)
    p = pathlib.Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"
    lib = ctypes.CDLL(str(p))
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    return lib


def rows(rng, nrow, npr):
    x = rng.standard_normal((nrow, npr)).astype(np.float32)
    x *= rng.uniform(0.01, 3.0, size=(nrow, 1)).astype(np.float32)  # per-row scale
    x[:, ::37] *= 6  # outlier columns
    x[nrow // 2, 5:40] = 0  # a partly zero row (blocks of zeros, scale 0 paths)
    return np.ascontiguousarray(x)


def run_both(kz, ggml, name, x, imp):
    tid, blk, bb = TYPES[name]
    nrow, npr = x.shape
    n = nrow * npr // blk * bb
    ours = np.zeros(n, np.uint8)
    ref = np.zeros(n, np.uint8)
    ip = imp.ctypes.data if imp is not None else None
    assert kz.kz_quant_row_w(tid, x.ctypes.data, ours.ctypes.data, npr, nrow, ip) == n
    assert ggml.ggml_quantize_chunk(tid, x.ctypes.data, ref.ctypes.data, 0, nrow, npr, ip) == n
    return ours.reshape(-1, bb), ref.reshape(-1, bb)


@pytest.mark.parametrize("weighted", [True, False], ids=["imatrix", "no-imatrix"])
@pytest.mark.parametrize("name", list(TYPES))
def test_bytes_vs_ggml(kz, ggml, name, weighted):
    rng = np.random.default_rng(100 + TYPES[name][0] + 50 * weighted)
    nrow, npr = 61, 256 * 5  # odd row count, 5 super-blocks / 40 blocks a row
    x = rows(rng, nrow, npr)
    imp = (rng.gamma(0.7, 1.0, size=npr).astype(np.float32) + 1e-3) if weighted else None
    ours, ref = run_both(kz, ggml, name, x, imp)
    same = np.all(ours == ref, axis=1)
    print(f"{name} {'imatrix' if weighted else 'no imatrix'}: {same.mean():.4%} of {same.size} blocks identical")
    bad = np.flatnonzero(~same)
    assert bad.size == 0, f"{name}: {bad.size} of {same.size} blocks differ from llama.cpp, first {bad[:5]}"


def test_weights_matter(kz, ggml):
    """the importance changes the result (so the weighted path is the one compared above)"""
    rng = np.random.default_rng(7)
    x = rows(rng, 5, 512)
    imp = rng.gamma(0.5, 1.0, size=512).astype(np.float32) + 1e-3
    for name in ("Q4_0", "Q4_K", "IQ4_NL", "Q6_K"):
        a, _ = run_both(kz, ggml, name, x, imp)
        b, _ = run_both(kz, ggml, name, x, None)
        assert not np.array_equal(a, b), name
