"""Importance-matrix files against the reference `gguf` package, in llama.cpp's layout
(tools/imatrix/imatrix.cpp save_imatrix, common/imatrix-loader.cpp):

(a) a matrix accumulated by our C code (ctypes on libkazeia_dev.so) and written by kz_imatrix_write
    is read by gguf.GGUFReader: keys and their types, tensor names (sorted), shapes, F32 values
    equal to a numpy float64 sum of squares, counts;
(b) a file written by gguf.GGUFWriter the way llama-imatrix writes it (including a 3-D expert
    entry, tensors in another order) is read by kz_imatrix_read with the same numbers;
(c) files llama-quantize would refuse (no imatrix.* keys, F16 sums, a lone in_sum2) are refused.
"""
import ctypes
import os
from pathlib import Path

import numpy as np

import gguf  # must fail (not skip) when missing
from gguf import GGUFValueType as VT

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / os.environ.get("KZ_BUILD", "build") / "libkazeia_dev.so"


def lib():
    assert LIB.exists(), f"{LIB} not built (make dev)"
    L = ctypes.CDLL(str(LIB))
    vp, cp, i64, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64, ctypes.c_size_t
    fp = ctypes.POINTER(ctypes.c_float)
    L.kz_imatrix_new.restype = vp
    L.kz_imatrix_free.argtypes = [vp]
    L.kz_imatrix_add.argtypes = [vp, cp, i64, fp, i64, cp, sz]
    L.kz_imatrix_write.argtypes = [vp, cp, cp, ctypes.c_int, ctypes.c_int, cp, sz]
    L.kz_imatrix_read.argtypes = [cp, cp, sz]
    L.kz_imatrix_read.restype = vp
    L.kz_imatrix_weights.argtypes = [vp, cp, i64, fp]
    L.kz_imatrix_count.argtypes = [vp]
    L.kz_imatrix_entry.argtypes = [vp, cp, ctypes.POINTER(i64), ctypes.POINTER(i64),
                                   ctypes.POINTER(ctypes.POINTER(ctypes.c_double)),
                                   ctypes.POINTER(ctypes.POINTER(i64))]
    L.kz_imatrix_chunk_count.argtypes = [vp]
    L.kz_imatrix_chunk_size.argtypes = [vp]
    L.kz_imatrix_dataset.argtypes = [vp]
    L.kz_imatrix_dataset.restype = cp
    return L


def f32p(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def entry(L, im, name):
    npr, nmat = ctypes.c_int64(), ctypes.c_int64()
    s = ctypes.POINTER(ctypes.c_double)()
    c = ctypes.POINTER(ctypes.c_int64)()
    assert L.kz_imatrix_entry(im, name.encode(), ctypes.byref(npr), ctypes.byref(nmat), ctypes.byref(s),
                              ctypes.byref(c)) == 0, name
    sums = np.ctypeslib.as_array(s, shape=(nmat.value * npr.value,)).copy().reshape(nmat.value, npr.value)
    counts = np.ctypeslib.as_array(c, shape=(nmat.value,)).copy()
    return sums, counts


def kv_value(field):
    if field.types[0] == VT.ARRAY:
        return [bytes(field.parts[i]).decode() for i in field.data]
    v = field.parts[field.data[0]]
    return bytes(v).decode() if field.types[0] == VT.STRING else v[0]


def test_ours_read_by_gguf(tmp_path):
    L = lib()
    rng = np.random.default_rng(23)
    spec = {"blk.3.ffn_down.weight": 45, "blk.0.attn_qkv.weight": 33, "output.weight": 33,
            "blk.0.ssm_out.weight": 7}
    ref = {n: np.zeros(w) for n, w in spec.items()}
    rows = {n: 0 for n in spec}
    err = ctypes.create_string_buffer(512)
    im = L.kz_imatrix_new()
    for step in range(3):
        for n, w in spec.items():
            k = int(rng.integers(1, 40))
            x = (rng.standard_normal((k, w)) * 10.0 ** rng.uniform(-2, 2, (k, 1))).astype(np.float32)
            ref[n] += (x.astype(np.float64) ** 2).sum(0)
            rows[n] += k
            assert L.kz_imatrix_add(im, n.encode(), w, f32p(x), k, err, 512) == 0, err.value
    out = tmp_path / "ours.imatrix.gguf"
    assert L.kz_imatrix_write(im, str(out).encode(), b"calib.txt", 7, 256, err, 512) == 0, err.value
    L.kz_imatrix_free(im)
    assert sorted(os.listdir(tmp_path)) == ["ours.imatrix.gguf"]

    r = gguf.GGUFReader(str(out))
    f = r.fields
    assert kv_value(f["general.type"]) == "imatrix"
    assert f["imatrix.datasets"].types == [VT.ARRAY, VT.STRING]
    assert kv_value(f["imatrix.datasets"]) == ["calib.txt"]
    assert f["imatrix.chunk_count"].types == [VT.UINT32] and kv_value(f["imatrix.chunk_count"]) == 7
    assert f["imatrix.chunk_size"].types == [VT.UINT32] and kv_value(f["imatrix.chunk_size"]) == 256
    names = [t.name for t in r.tensors]
    want = []
    for n in sorted(spec):
        want += [n + ".in_sum2", n + ".counts"]
    assert names == want
    for t in r.tensors:
        assert t.tensor_type == gguf.GGMLQuantizationType.F32
        base = t.name.rsplit(".", 1)[0]
        if t.name.endswith(".in_sum2"):
            assert list(t.shape) == [spec[base], 1]
            got = np.asarray(t.data, dtype=np.float64).reshape(-1)
            np.testing.assert_allclose(got, ref[base], rtol=1e-6)
        else:
            assert list(t.shape) == [1, 1]
            assert float(np.asarray(t.data).reshape(-1)[0]) == rows[base]


def test_gguf_py_file_read_by_ours(tmp_path):
    L = lib()
    rng = np.random.default_rng(5)
    path = tmp_path / "theirs.imatrix.gguf"
    w = gguf.GGUFWriter(str(path), arch="unused")
    w.kv_data[0].pop("general.architecture", None)  # llama-imatrix writes no architecture
    w.add_string("general.type", "imatrix")
    w.add_array("imatrix.datasets", ["a.txt", "b.txt"])
    w.add_uint32("imatrix.chunk_count", 12)
    w.add_uint32("imatrix.chunk_size", 512)
    dense = (rng.random(29) * 100).astype(np.float32)
    experts = (rng.random((3, 11)) * 10).astype(np.float32)  # ne = [11, 3]: 3 experts
    ecounts = np.array([[40.0], [0.0], [9.0]], dtype=np.float32)
    # counts first, and the expert entry between: pairing must not depend on the order
    w.add_tensor("blk.0.ffn_up.weight.counts", np.array([[6144.0]], dtype=np.float32))
    w.add_tensor("blk.1.ffn_gate_exps.weight.in_sum2", experts)
    w.add_tensor("blk.0.ffn_up.weight.in_sum2", dense.reshape(1, 29))
    w.add_tensor("blk.1.ffn_gate_exps.weight.counts", ecounts)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    err = ctypes.create_string_buffer(512)
    im = L.kz_imatrix_read(str(path).encode(), err, 512)
    assert im, err.value
    try:
        assert L.kz_imatrix_count(im) == 2
        assert L.kz_imatrix_chunk_count(im) == 12 and L.kz_imatrix_chunk_size(im) == 512
        assert L.kz_imatrix_dataset(im) == b"a.txt"
        s, c = entry(L, im, "blk.0.ffn_up.weight")
        assert s.shape == (1, 29) and list(c) == [6144]
        np.testing.assert_array_equal(s[0].astype(np.float32), dense)
        s, c = entry(L, im, "blk.1.ffn_gate_exps.weight")
        assert s.shape == (3, 11) and list(c) == [40, 0, 9]
        np.testing.assert_array_equal(s.astype(np.float32), experts)
        wt = np.zeros(29, dtype=np.float32)
        assert L.kz_imatrix_weights(im, b"blk.0.ffn_up.weight", 29, f32p(wt)) == 0
        np.testing.assert_allclose(wt, dense / 6144.0, rtol=1e-6)
        assert L.kz_imatrix_weights(im, b"blk.0.ffn_up.weight", 28, f32p(wt)) == -1
        # written again by us, read by gguf: the expert shapes survive
        out = tmp_path / "again.gguf"
        assert L.kz_imatrix_write(im, str(out).encode(), None, 12, 512, err, 512) == 0, err.value
        r = gguf.GGUFReader(str(out))
        assert kv_value(r.fields["imatrix.datasets"]) == ["a.txt", "b.txt"]
        t = {t.name: t for t in r.tensors}
        assert list(t["blk.1.ffn_gate_exps.weight.in_sum2"].shape) == [11, 3]
        assert list(t["blk.1.ffn_gate_exps.weight.counts"].shape) == [1, 3]
        np.testing.assert_array_equal(np.asarray(t["blk.1.ffn_gate_exps.weight.counts"].data).reshape(-1),
                                      ecounts.reshape(-1))
    finally:
        L.kz_imatrix_free(im)


def write_bad(path, meta=True, dtype=np.float32, lone=False):
    w = gguf.GGUFWriter(str(path), arch="unused")
    w.add_string("general.type", "imatrix")
    if meta:
        w.add_array("imatrix.datasets", ["x"])
        w.add_uint32("imatrix.chunk_count", 1)
        w.add_uint32("imatrix.chunk_size", 8)
    w.add_tensor("w.in_sum2", np.ones((1, 8), dtype=dtype))
    if not lone:
        w.add_tensor("w.counts", np.array([[8.0]], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_refused(tmp_path):
    L = lib()
    err = ctypes.create_string_buffer(512)
    for i, (kw, word) in enumerate([({"meta": False}, b"imatrix.chunk_count"), ({"dtype": np.float16}, b"F32"),
                                    ({"lone": True}, b"w.counts"), ({}, None)]):
        p = tmp_path / f"bad{i}.gguf"
        write_bad(p, **kw)
        im = L.kz_imatrix_read(str(p).encode(), err, 512)
        if word is None:
            assert im, err.value
            L.kz_imatrix_free(im)
        else:
            assert not im and word in err.value, err.value


def test_read_by_llamacpp_gguf(tmp_path):
    """llama.cpp's own GGUF reader (libggml-base through ctypes) on our file: the checks
    common/imatrix-loader.cpp and llama-quantize make (keys and their types, F32 pairs)."""
    import llama_cpp
    L = lib()
    err = ctypes.create_string_buffer(512)
    im = L.kz_imatrix_new()
    x = np.random.default_rng(1).standard_normal((20, 64)).astype(np.float32)
    for n in (b"blk.0.attn_q.weight", b"blk.0.ffn_down.weight"):
        assert L.kz_imatrix_add(im, n, 64, f32p(x), 20, err, 512) == 0
    out = tmp_path / "im.gguf"
    assert L.kz_imatrix_write(im, str(out).encode(), b"t.txt", 3, 128, err, 512) == 0, err.value
    L.kz_imatrix_free(im)

    G = ctypes.CDLL(str(Path(llama_cpp.__file__).parent / "lib" / "libggml-base.so"))

    class Params(ctypes.Structure):
        _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]

    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    G.gguf_init_from_file.argtypes = [ctypes.c_char_p, Params]
    G.gguf_init_from_file.restype = vp
    for f, a, r in [("gguf_find_key", [vp, ctypes.c_char_p], i64), ("gguf_get_kv_type", [vp, i64], ctypes.c_int),
                    ("gguf_get_arr_type", [vp, i64], ctypes.c_int), ("gguf_get_arr_n", [vp, i64], ctypes.c_size_t),
                    ("gguf_get_arr_str", [vp, i64, ctypes.c_size_t], ctypes.c_char_p),
                    ("gguf_get_val_u32", [vp, i64], ctypes.c_uint32), ("gguf_get_val_str", [vp, i64], ctypes.c_char_p),
                    ("gguf_get_n_tensors", [vp], i64), ("gguf_get_tensor_name", [vp, i64], ctypes.c_char_p),
                    ("gguf_get_tensor_type", [vp, i64], ctypes.c_int), ("gguf_free", [vp], None)]:
        getattr(G, f).argtypes, getattr(G, f).restype = a, r
    g = G.gguf_init_from_file(str(out).encode(), Params(True, None))
    assert g, "llama.cpp's gguf reader refused our file"
    try:
        k = G.gguf_find_key(g, b"general.type")
        assert G.gguf_get_kv_type(g, k) == 8 and G.gguf_get_val_str(g, k) == b"imatrix"
        k = G.gguf_find_key(g, b"imatrix.datasets")
        assert G.gguf_get_kv_type(g, k) == 9 and G.gguf_get_arr_type(g, k) == 8  # array of strings
        assert G.gguf_get_arr_n(g, k) == 1 and G.gguf_get_arr_str(g, k, 0) == b"t.txt"
        for key, v in ((b"imatrix.chunk_count", 3), (b"imatrix.chunk_size", 128)):
            k = G.gguf_find_key(g, key)
            assert G.gguf_get_kv_type(g, k) == 4 and G.gguf_get_val_u32(g, k) == v  # UINT32
        names = [G.gguf_get_tensor_name(g, i) for i in range(G.gguf_get_n_tensors(g))]
        assert names == [b"blk.0.attn_q.weight.in_sum2", b"blk.0.attn_q.weight.counts",
                         b"blk.0.ffn_down.weight.in_sum2", b"blk.0.ffn_down.weight.counts"]
        assert all(G.gguf_get_tensor_type(g, i) == 0 for i in range(len(names)))  # GGML_TYPE_F32
    finally:
        G.gguf_free(g)
