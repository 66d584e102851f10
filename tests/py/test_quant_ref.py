"""Quant kernels of libkazeia_dev.so vs the gguf Python package's numpy reference (gguf.quants):
F16 / BF16 / Q8_0 / Q4_0 quantize must give identical bytes, dequantize identical floats.

Q4_0 note: the C reference quantizer computes x*id + 8.5f; llama-quantize's result depends on
whether the compiler fused that into an FMA. gguf-py 0.19 computes it with two float32
roundings, as kz_quant_row does; some other gguf-py versions emulate the FMA in float64.
kz_quant_q4_0_ref(fused=1) is the FMA form. The tests pick the mode the installed gguf-py uses
(probed on a constructed boundary block) and require identical bytes to it, and characterise
every fused/unfused difference exactly: it occurs only where t = fl(fl(x*id) + 8.5) is an
integer m while the exact x*id + 8.5, rounded once to float, is below m; the fused nibble is
then exactly one lower.
"""
import ctypes
import os
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import quants

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / os.environ.get("KZ_BUILD", "build") / "libkazeia_dev.so"

T = {"F32": 0, "F16": 1, "Q4_0": 2, "Q8_0": 8, "BF16": 30}


@pytest.fixture(scope="module")
def lib():
    assert LIB.exists(), f"{LIB} not found: build it first (make BUILD=...)"
    L = ctypes.CDLL(str(LIB))
    L.kz_quant_row.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.kz_quant_row.restype = ctypes.c_size_t
    L.kz_dequant_row.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.kz_dequant_row.restype = ctypes.c_int
    L.kz_act_quant.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.kz_act_quant.restype = None
    L.kz_vec_dot.argtypes = [ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]
    L.kz_vec_dot.restype = ctypes.c_float
    L.kz_quant_q4_0_ref.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    L.kz_quant_q4_0_ref.restype = ctypes.c_size_t
    return L


def row_bytes(tname, n):
    bs, ts = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18)}[tname]
    return n // bs * ts


def kz_quant(lib, tname, x):
    x = np.ascontiguousarray(x, dtype=np.float32).ravel()
    out = np.zeros(row_bytes(tname, x.size), dtype=np.uint8)
    nb = lib.kz_quant_row(T[tname], x.ctypes.data, out.ctypes.data, x.size)
    assert nb == out.size
    return out


def kz_dequant(lib, tname, b, n):
    b = np.ascontiguousarray(b, dtype=np.uint8)
    out = np.zeros(n, dtype=np.float32)
    assert lib.kz_dequant_row(T[tname], b.ctypes.data, out.ctypes.data, n) == 0
    return out


def ref_quant(tname, x):
    return np.ascontiguousarray(quants.quantize(np.asarray(x, dtype=np.float32), QT[tname])).view(np.uint8).ravel()


def ref_dequant(tname, b, n):
    b = np.ascontiguousarray(b, dtype=np.uint8)
    if tname == "F16":
        return b.view(np.float16).astype(np.float32)
    return quants.dequantize(b.reshape(1, -1), QT[tname]).ravel()[:n]


def rand_rows(rng, rows, n):
    """rows with per-row magnitudes 1e-4..1e4, a few outliers, one all-zero block"""
    mags = 10.0 ** rng.uniform(-4, 4, size=(rows, 1))
    x = (rng.standard_normal((rows, n)) * mags).astype(np.float32)
    x[rng.random((rows, n)) < 0.01] *= 16
    x[0, :32] = 0
    return x


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


# ---------------- F16 / BF16 ----------------

def test_f16_dequant_exhaustive(lib):
    h = np.arange(65536, dtype=np.uint16)
    got = kz_dequant(lib, "F16", h.view(np.uint8), 65536)
    want = h.view(np.float16).astype(np.float32)
    assert np.array_equal(bits(got), bits(want))  # NaN payloads included


def f32_probe_values():
    """for every upper half (sign, exponent, 7 mantissa bits) a set of lower-16-bit patterns that
    sit on and around every fp16 and bf16 rounding boundary, plus random ones"""
    hi = np.arange(65536, dtype=np.uint32) << 16
    lo = np.array([0, 1, 0x0fff, 0x1000, 0x1001, 0x1fff, 0x2000, 0x2001, 0x7fff, 0x8000, 0x8001,
                   0xefff, 0xf000, 0xf001, 0xffff], dtype=np.uint32)
    rng = np.random.default_rng(7)
    u = (hi[:, None] | lo[None, :]).ravel()
    u = np.concatenate([u, rng.integers(0, 2**32, size=200000, dtype=np.uint64).astype(np.uint32)])
    return u.view(np.float32)


def test_f16_quant_matches_numpy(lib):
    x = f32_probe_values()
    got = kz_quant(lib, "F16", x).view(np.uint16)
    with np.errstate(over="ignore", invalid="ignore"):
        want = ref_quant("F16", x).view(np.uint16)
    nan = np.isnan(x)
    # NaN: ggml writes the canonical quiet NaN 0x7e00, numpy keeps payload bits; both are NaN
    assert np.all(np.isnan(got[nan].view(np.float16)))
    assert np.array_equal(got[~nan], want[~nan]), np.flatnonzero(got[~nan] != want[~nan])[:10]


def test_bf16_matches_numpy(lib):
    x = f32_probe_values()
    got = kz_quant(lib, "BF16", x)
    want = ref_quant("BF16", x)
    assert np.array_equal(got, want)  # NaN handling is the same rule in both
    h = np.arange(65536, dtype=np.uint16).view(np.uint8)
    assert np.array_equal(bits(kz_dequant(lib, "BF16", h, 65536)), bits(ref_dequant("BF16", h, 65536)))


# ---------------- Q8_0 / Q4_0 ----------------

def boundary_block():
    """a Q4_0 block where the fused and the two-rounding forms give different nibbles"""
    x = (np.arange(32, dtype=np.float32) - 16) * np.float32(0.05)
    x[0] = np.float32(-1.37)                       # the max: d = x[0] / -8
    d = np.float32(x[0] / np.float32(-8))
    idv = np.float32(np.float32(1) / d)
    for k in range(-7, 8):
        c0 = np.float32((k - 0.5) / np.float64(idv))
        for u in range(-40, 41):
            c = (np.array([c0], np.float32).view(np.int32) + u).view(np.float32)[0]
            p = np.float32(c * idv)
            t = np.float32(p + np.float32(8.5))
            f = np.float32(np.float64(c) * np.float64(idv) + 8.5)
            if t == np.floor(t) and f < t and abs(c) < abs(x[0]):
                x[5] = c
                return x
    raise AssertionError("no boundary value found")


def gguf_q4_0_fused():
    """1 if the installed gguf-py Q4_0 quantizer emulates the FMA, 0 if it rounds twice"""
    x = boundary_block()
    q = ref_quant("Q4_0", x)
    nib = q[2 + 5] & 15
    t = np.float32(np.float32(x[5] * np.float32(1 / np.float32(x[0] / np.float32(-8)))) + np.float32(8.5))
    return 0 if nib == int(t) else 1


def kz_quant_mode(lib, tname, x):
    """kz bytes in the rounding mode of the installed gguf-py (only Q4_0 has two modes)"""
    if tname != "Q4_0" or gguf_q4_0_fused() == 0:
        return kz_quant(lib, tname, x)
    x = np.ascontiguousarray(x, dtype=np.float32).ravel()
    out = np.zeros(row_bytes(tname, x.size), dtype=np.uint8)
    assert lib.kz_quant_q4_0_ref(x.ctypes.data, out.ctypes.data, x.size, 1) == out.size
    return out


def test_q4_0_default_mode_is_two_roundings(lib):
    """kz_quant_row is the two-rounding form; fused=1 differs on the boundary block"""
    x = boundary_block()
    fused = np.zeros(18, np.uint8)
    lib.kz_quant_q4_0_ref(x.ctypes.data, fused.ctypes.data, 32, 1)
    unf = kz_quant(lib, "Q4_0", x)
    assert (unf[2 + 5] & 15) == (fused[2 + 5] & 15) + 1
    print(f"installed gguf-py Q4_0 mode: {'fused (FMA emulation)' if gguf_q4_0_fused() else 'two roundings'}")


@pytest.mark.parametrize("tname", ["Q8_0", "Q4_0"])
@pytest.mark.parametrize("rows,n", [(1, 32), (3, 32 * 7), (17, 32 * 33), (63, 32 * 5)])
def test_quant_identical_bytes(lib, tname, rows, n):
    rng = np.random.default_rng(rows * 1000 + n)
    x = rand_rows(rng, rows, n)
    got = kz_quant_mode(lib, tname, x)
    want = ref_quant(tname, x)
    assert got.size == want.size
    nbad = int(np.count_nonzero(got != want))
    assert nbad == 0, f"{nbad} bytes differ"


@pytest.mark.parametrize("tname", ["Q8_0", "Q4_0"])
def test_quant_special_blocks(lib, tname):
    """ties, repeated maxima of both signs, a single non-zero, tiny and huge scales"""
    b = []
    b.append(np.arange(32, dtype=np.float32) - 15.5)            # x*id lands on .5 for Q8_0-ish grids
    b.append(np.full(32, -3.0, np.float32))                       # all equal (negative)
    b.append(np.where(np.arange(32) % 2 == 0, 2.0, -2.0).astype(np.float32))  # +max first
    b.append(np.where(np.arange(32) % 2 == 0, -2.0, 2.0).astype(np.float32))  # -max first
    z = np.zeros(32, np.float32); z[17] = 1e-3; b.append(z)
    b.append((np.arange(32, dtype=np.float32) - 16) * np.float32(127 / 16))   # d = 1 exactly for Q8_0
    b.append((np.arange(32, dtype=np.float32) - 16) * np.float32(1e-6))       # fp16 subnormal scale
    b.append((np.arange(32, dtype=np.float32) - 16) * np.float32(3e4))        # scale near fp16 max
    half = np.float32(0.5) + np.arange(32, dtype=np.float32)                  # .5 ties with d = 1
    half[0] = 127.0; b.append(np.where(np.arange(32) % 3 == 0, -half, half).astype(np.float32))
    b.append(boundary_block())
    x = np.stack(b)
    assert np.array_equal(kz_quant_mode(lib, tname, x), ref_quant(tname, x))


@pytest.mark.parametrize("tname", ["Q8_0", "Q4_0", "F16", "BF16"])
def test_dequant_random_bytes_identical(lib, tname):
    rng = np.random.default_rng(5)
    nblk = 4096
    if tname in ("Q8_0", "Q4_0"):
        bs = row_bytes(tname, 32)
        raw = rng.integers(0, 256, size=(nblk, bs), dtype=np.uint8)
        # scales: random finite fp16 of all magnitudes (inf/NaN scales are not a real format case)
        d = rng.integers(0, 65536, size=nblk, dtype=np.uint32).astype(np.uint16)
        d = np.where((d & 0x7c00) == 0x7c00, d & 0xbfff, d).astype(np.uint16)
        raw[:, :2] = d.view(np.uint8).reshape(nblk, 2)
        n = nblk * 32
    else:
        raw = rng.integers(0, 256, size=(nblk * 64,), dtype=np.uint8)
        n = nblk * 32
    raw = raw.ravel()
    got = kz_dequant(lib, tname, raw, n)
    want = ref_dequant(tname, raw, n)
    assert np.array_equal(bits(got), bits(want))


def test_q4_0_fma_mode_differences_are_exactly_the_boundary_cases(lib):
    """fused (fmaf) vs two-rounding Q4_0: characterise every difference exactly"""
    rng = np.random.default_rng(11)
    nblk = 20000
    x = rng.standard_normal((nblk, 32)).astype(np.float32)
    # the block max, and then elements placed on/near the half-integer grid k-0.5 in units of
    # d, where the two rounding modes can disagree (random data almost never gets there)
    imax = np.abs(x).argmax(axis=1)
    mx = x[np.arange(nblk), imax]
    d = (mx / np.float32(-8)).astype(np.float32)
    idv = (np.float32(1) / d).astype(np.float32)
    k = rng.integers(-7, 8, size=(nblk, 8))
    cand = ((k - 0.5) / idv[:, None].astype(np.float64)).astype(np.float32)
    nudge = rng.integers(-3, 4, size=cand.shape)
    cand = (cand.view(np.int32) + nudge).view(np.float32)
    cols = np.array([1, 4, 9, 14, 18, 22, 27, 30])
    for j, c in enumerate(cols):
        ok = (c != imax) & (np.abs(cand[:, j]) < np.abs(mx))
        x[ok, c] = cand[ok, j]
    x = np.ascontiguousarray(x)

    unfused = kz_quant(lib, "Q4_0", x).reshape(nblk, 18)
    assert np.array_equal(kz_quant_mode(lib, "Q4_0", x), ref_quant("Q4_0", x))
    fused = np.zeros_like(unfused)
    assert lib.kz_quant_q4_0_ref(x.ctypes.data, fused.ctypes.data, x.size, 1) == fused.size
    assert np.array_equal(fused[:, :2], unfused[:, :2])  # scales never differ

    def nibbles(b):
        qs = b[:, 2:]
        return np.concatenate([qs & 15, qs >> 4], axis=1).astype(np.int32)

    qu, qf = nibbles(unfused), nibbles(fused)
    # recompute the ingredients: id in float32 as the quantizer does (d read back is fp16-rounded,
    # so recompute from the data)
    amax_i = np.abs(x).argmax(axis=1)
    dd = (x[np.arange(nblk), amax_i] / np.float32(-8)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idd = np.where(dd == 0, np.float32(0), np.float32(1) / dd).astype(np.float32)
    p32 = (x * idd[:, None]).astype(np.float32)
    t_unf = (p32 + np.float32(8.5)).astype(np.float32)
    # exact x*id + 8.5 (exact in float64: the product has <= 48 significant bits and |x*id| >= 0.5
    # wherever the sum is near an integer), rounded once to float32 = what fmaf returns
    s_exact = x.astype(np.float64) * idd[:, None].astype(np.float64) + 8.5
    t_fma = s_exact.astype(np.float32)
    assert np.array_equal(qf, np.clip(np.floor(t_fma), 0, 15).astype(np.int32))  # FMA emulation
    assert np.array_equal(qu, np.clip(np.floor(t_unf), 0, 15).astype(np.int32))
    diff = qu != qf
    n_diff = int(diff.sum())
    print(f"Q4_0 fused vs two-rounding: {n_diff} of {x.size} nibbles differ")
    assert n_diff > 50, "the test data should contain boundary cases"
    # every difference: the two-rounding sum landed exactly on an integer m that the exact sum
    # does not reach, and the fused nibble is one lower
    assert np.all(t_unf[diff] == np.floor(t_unf[diff]))
    assert np.all(t_fma[diff] < t_unf[diff])
    assert np.all(qu[diff] - qf[diff] == 1)


# ---------------- activations and dot ----------------

@pytest.mark.parametrize("wname", ["Q8_0", "Q4_0"])
def test_act_quant_is_q8_0_reference(lib, wname):
    rng = np.random.default_rng(3)
    x = rand_rows(rng, 1, 32 * 33).ravel()
    out = np.zeros(row_bytes("Q8_0", x.size), np.uint8)
    lib.kz_act_quant(T[wname], x.ctypes.data, out.ctypes.data, x.size)
    assert np.array_equal(out, ref_quant("Q8_0", x))


@pytest.mark.parametrize("wname", ["F16", "BF16", "Q8_0", "Q4_0"])
def test_vec_dot_vs_numpy_dequantized(lib, wname):
    """weights and activations quantized by gguf-py, dequantized by gguf-py, dotted in float64"""
    rng = np.random.default_rng(17)
    aname = {"F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0", "Q4_0": "Q8_0"}[wname]
    for n in (32, 32 * 7, 32 * 33):
        for rep in range(20):
            # magnitudes 1e-2..1e2 per row: inside the fp16 range also for the F16 products
            w = (rng.standard_normal(n) * 10.0 ** rng.uniform(-2, 2)).astype(np.float32)
            a = (rng.standard_normal(n) * 10.0 ** rng.uniform(-2, 2)).astype(np.float32)
            if rep % 2:
                a = np.abs(a)
            wq, aq = ref_quant(wname, w), ref_quant(aname, a)
            ref_terms = ref_dequant(wname, wq, n).astype(np.float64) * ref_dequant(aname, aq, n).astype(np.float64)
            ref = ref_terms.sum()
            got = lib.kz_vec_dot(T[wname], wq.ctypes.data, aq.ctypes.data, n)
            k = (n // 32 + 2) if wname in ("Q8_0", "Q4_0") else (n + 1)
            u = 2.0 ** -24
            bound = k * u / (1 - k * u) * np.abs(ref_terms).sum() + 1e-38
            assert abs(got - ref) <= bound, (wname, n, rep, got, ref, bound)
