"""GGUF interop against the reference Python `gguf` package.

(a) files written by gguf.GGUFWriter are read by `kazeia info` (names, types, shapes, values);
(b) files written by our C writer (ctypes on libkazeia_dev.so) are read by gguf.GGUFReader and every
    key, value and tensor byte must match what we wrote;
(c) `kazeia info` rejects broken files with exit 1 and a one-line message.
"""
import ctypes
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import gguf  # must fail (not skip) when missing
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("KZ_BUILD", "build")
KAZEIA = BUILD / "kazeia"
LIB = BUILD / "libkazeia_dev.so"

# our short value-type names (kz_gguf_type_name) for gguf-py's enum
VT_NAME = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
           VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "str", VT.ARRAY: "arr",
           VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64"}


def run_info(path, *extra):
    assert KAZEIA.exists(), f"{KAZEIA} not built (set KZ_BUILD)"
    return subprocess.run([str(KAZEIA), "info", *extra, str(path)], capture_output=True, text=True,
                          errors="replace", timeout=60)


def parse_info(out):
    """-> (header dict, metadata {key: (type, value_text)}, tensors [(name, type, ne, bytes, off)])"""
    header, meta, tensors = {}, {}, []
    section = "header"
    for line in out.splitlines():
        if line.startswith("metadata ("):
            section = "meta"
            continue
        if line.startswith("tensors ("):
            section = "tensors"
            continue
        if line.startswith("totals per type"):
            section = "totals"
            continue
        if section == "header":
            m = re.match(r"^([a-z_ ]+):\s+(.*)$", line)
            if m:
                header[m.group(1).strip()] = m.group(2)
        elif section == "meta" and line.startswith("  "):
            m = re.match(r"^  (\S+)\s+(\S+)\s+(.*)$", line)
            assert m, line
            meta[m.group(1)] = (m.group(2), m.group(3))
        elif section == "tensors":
            m = re.match(r"^\s+(\d+)\s+(\S+)\s+(\S+)\s+\[([0-9, ]+)\]\s+(\d+)\s+(\d+)$", line)
            if m:
                ne = [int(x) for x in m.group(4).split(",")]
                tensors.append((m.group(2), m.group(3), ne, int(m.group(5)), int(m.group(6))))
    return header, meta, tensors


def rng_f32(rng, *shape):
    return (rng.standard_normal(shape) * 0.7 + 0.1).astype(np.float32)


# ---------------------------------------------------------------- (a) gguf-py writes, we read

def write_pyfile(path, rng):
    w = gguf.GGUFWriter(str(path), "qwen35")
    w.add_block_count(7)
    w.add_context_length(262144)
    w.add_embedding_length(1024)
    w.add_uint32("qwen35.ssm.state_size", 128)
    w.add_float32("qwen35.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_array("qwen35.rope.dimension_sections", [11, 11, 10, 0])
    w.add_uint8("t.u8", 201)
    w.add_int8("t.i8", -77)
    w.add_uint16("t.u16", 65001)
    w.add_int16("t.i16", -32001)
    w.add_int32("t.i32", -2000000001)
    w.add_uint64("t.u64", 18000000000000000000)
    w.add_int64("t.i64", -9000000000000000001)
    w.add_float64("t.f64", -1.25e-300)
    w.add_bool("t.true", True)
    w.add_bool("t.false", False)
    w.add_string("t.str", 'quote " back\\ nl\n')
    w.add_string("tokenizer.chat_template", "{% for message in messages %}" * 40)
    w.add_array("tokenizer.ggml.tokens", ["a", "bc", "\u00e9", "<|im_end|>", "", "x y"] + [f"t{i}" for i in range(20)])
    w.add_array("tokenizer.ggml.scores", [0.5, -1.5, 2.25])
    w.add_array("t.bools", [True, False, True])
    tensors = {
        "token_embd.weight": rng_f32(rng, 3, 7),                       # F32, ne [7, 3]
        "blk.0.attn_norm.weight": rng_f32(rng, 5).astype(np.float16),  # F16, ne [5]
        "blk.0.ffn_gate.weight": rng_f32(rng, 2, 3, 5),                # F32 3-D, ne [5, 3, 2]
    }
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    q8 = gguf.quants.quantize(rng_f32(rng, 4, 96), QT.Q8_0)  # bytes (4, 102) -> ne [96, 4]
    w.add_tensor("blk.0.ffn_up.weight", q8, raw_dtype=QT.Q8_0)
    bf = gguf.quants.quantize(rng_f32(rng, 3, 2), QT.BF16)
    w.add_tensor("blk.0.ssm_a", bf, raw_dtype=QT.BF16)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_info_reads_gguf_py_file(tmp_path):
    rng = np.random.default_rng(1234)
    path = tmp_path / "py.gguf"
    write_pyfile(path, rng)
    r = run_info(path)
    assert r.returncode == 0, r.stderr
    header, meta, tensors = parse_info(r.stdout)
    ref = gguf.GGUFReader(str(path))

    assert header["gguf version"] == "3"
    assert header["alignment"] == "32"
    assert header["architecture"] == "qwen35"
    assert int(header["size"].split()[0]) == path.stat().st_size
    hp = r.stdout.split("hparams (qwen35.*):")[1].split("metadata (")[0]
    assert re.search(r"qwen35\.block_count\s+u32\s+7\n", hp)
    assert re.search(r"qwen35\.rope\.dimension_sections\s+arr\[i32\]\s+n=4 \[11, 11, 10, 0\]", hp)

    # every key, with the same type and value as gguf-py reads it
    fields = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert set(meta) == set(fields)
    for key, f in fields.items():
        typ, val = meta[key]
        if f.types[0] == VT.ARRAY:
            assert typ == f"arr[{VT_NAME[f.types[1]]}]", key
            items = f.contents()
            assert val.startswith(f"n={len(items)} ["), (key, val)
            if f.types[1] == VT.STRING:
                shown = re.findall(r'"((?:[^"\\]|\\.)*)"', val)
                assert len(shown) == min(len(items), 8), (key, val)
                for s, want in zip(shown, items):
                    assert s.encode().decode("unicode_escape").encode("latin-1").decode() == want[:32]
            elif f.types[1] in (VT.FLOAT32, VT.FLOAT64):
                got = [float(x) for x in val[val.index("[") + 1:val.rindex("]")].split(",")]
                np.testing.assert_allclose(got, items[:8], rtol=1e-6)
            elif f.types[1] == VT.BOOL:
                assert val == f"n={len(items)} [" + ", ".join("true" if b else "false" for b in items) + "]"
            else:
                assert val == f"n={len(items)} [" + ", ".join(str(int(x)) for x in items[:8]) + (", ..." if len(items) > 8 else "") + "]"
        else:
            assert typ == VT_NAME[f.types[0]], key
            want = f.contents()
            if f.types[0] == VT.STRING:
                m = re.match(r'^"((?:[^"\\]|\\.)*)"(\.\.\. \((\d+) bytes\))?$', val)
                assert m, val
                text = m.group(1).encode().decode("unicode_escape").encode("latin-1").decode()
                if m.group(2):
                    assert int(m.group(3)) == len(want.encode()) and want.startswith(text) and len(text) < len(want)
                else:
                    assert text == want
            elif f.types[0] == VT.BOOL:
                assert val == ("true" if want else "false")
            elif f.types[0] in (VT.FLOAT32, VT.FLOAT64):
                assert float(val) == pytest.approx(float(want), rel=1e-7)
            else:
                assert int(val) == int(want), key

    # tensor table == gguf-py's view (ne order, type, bytes, absolute offset)
    data_off = int(header["data offset"])
    assert [t[0] for t in tensors] == [t.name for t in ref.tensors]
    for (name, typ, ne, nbytes, off), t in zip(tensors, ref.tensors):
        assert typ == t.tensor_type.name, name
        assert ne == [int(x) for x in t.shape], name
        assert nbytes == t.n_bytes, name
        assert data_off + off == t.data_offset, name
    want_shapes = {"token_embd.weight": [7, 3], "blk.0.attn_norm.weight": [5], "blk.0.ffn_gate.weight": [5, 3, 2],
                   "blk.0.ffn_up.weight": [96, 4], "blk.0.ssm_a": [2, 3]}
    assert {t[0]: t[2] for t in tensors} == want_shapes
    assert {t[0]: t[1] for t in tensors}["blk.0.ffn_up.weight"] == "Q8_0"
    m = re.search(r"^\s+total\s+(\d+) tensors\s+(\d+) bytes", r.stdout, re.M)
    assert m and int(m.group(1)) == 5 and int(m.group(2)) == sum(t.n_bytes for t in ref.tensors)
    m = re.search(r"^\s+Q8_0\s+1 tensors\s+(\d+) bytes", r.stdout, re.M)
    assert m and int(m.group(1)) == 4 * 102


def test_info_vocab_only_and_help(tmp_path):
    path = tmp_path / "vocab.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = run_info(path)
    assert r.returncode == 0, r.stderr
    assert "0 tensors" in r.stdout and "vocab:         3 tokens" in r.stdout
    assert re.search(r"^\s+total\s+0 tensors\s+0 bytes", r.stdout, re.M)
    h = subprocess.run([str(KAZEIA), "info", "--help"], capture_output=True, text=True)
    assert h.returncode == 0 and "usage: kazeia info" in h.stdout
    assert subprocess.run([str(KAZEIA), "info"], capture_output=True).returncode == 2


def test_info_rejects_broken_files(tmp_path):
    rng = np.random.default_rng(7)
    good = tmp_path / "good.gguf"
    write_pyfile(good, rng)
    raw = good.read_bytes()
    ref = gguf.GGUFReader(str(good))
    last = max(t.data_offset + t.n_bytes for t in ref.tensors)
    cases = {
        "magic": (b"GGUX" + raw[4:], "not a GGUF"),
        "version": (raw[:4] + (1).to_bytes(4, "little") + raw[8:], "version 1"),
        "truncated": (raw[:last - 1], "past the end"),
        "header": (raw[:20], "truncated"),
        "n_kv": (raw[:16] + (1 << 60).to_bytes(8, "little") + raw[24:], "n_kv"),
    }
    for name, (data, needle) in cases.items():
        p = tmp_path / f"{name}.gguf"
        p.write_bytes(data)
        r = run_info(p)
        assert r.returncode == 1, (name, r.stdout)
        err = r.stderr.strip()
        assert err and "\n" not in err and needle in err and str(p) in err, (name, err)
    r = run_info(tmp_path / "missing.gguf")
    assert r.returncode == 1 and "cannot open" in r.stderr


# ---------------------------------------------------------------- (b) we write, gguf-py reads

def load_lib():
    assert LIB.exists(), f"{LIB} not built (set KZ_BUILD)"
    lib = ctypes.CDLL(str(LIB))
    P, S, U32, U64, I64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int64
    sig = {
        "kz_gguf_writer_new": (P, [U32]),
        "kz_gguf_writer_free": (None, [P]),
        "kz_gguf_w_scalar": (ctypes.c_int, [P, S, U32, P]),
        "kz_gguf_w_u32": (ctypes.c_int, [P, S, U32]),
        "kz_gguf_w_str": (ctypes.c_int, [P, S, S]),
        "kz_gguf_w_arr": (ctypes.c_int, [P, S, U32, P, U64]),
        "kz_gguf_w_arr_str": (ctypes.c_int, [P, S, ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(U64), U64]),
        "kz_gguf_w_tensor_info": (ctypes.c_int, [P, S, U32, ctypes.POINTER(I64), U32]),
        "kz_gguf_writer_begin": (ctypes.c_int, [P, S]),
        "kz_gguf_writer_write_part": (ctypes.c_int, [P, P, ctypes.c_size_t]),
        "kz_gguf_writer_end_tensor": (ctypes.c_int, [P]),
        "kz_gguf_writer_write_tensor": (ctypes.c_int, [P, P, ctypes.c_size_t]),
        "kz_gguf_writer_finish": (ctypes.c_int, [P]),
        "kz_gguf_writer_error": (S, [P]),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    return lib


NP_OF = {VT.UINT8: np.uint8, VT.INT8: np.int8, VT.UINT16: np.uint16, VT.INT16: np.int16, VT.UINT32: np.uint32,
         VT.INT32: np.int32, VT.FLOAT32: np.float32, VT.BOOL: np.uint8, VT.UINT64: np.uint64, VT.INT64: np.int64,
         VT.FLOAT64: np.float64}


def test_our_writer_read_by_gguf_py(tmp_path):
    lib = load_lib()
    rng = np.random.default_rng(99)
    w = lib.kz_gguf_writer_new(64)
    assert w

    def ok(rc):
        assert rc == 0, lib.kz_gguf_writer_error(w).decode()

    scalars = {}
    for vt, np_t in NP_OF.items():
        if vt == VT.BOOL:
            v = np.array([1], dtype=np.uint8)
        elif np.issubdtype(np_t, np.integer):
            info = np.iinfo(np_t)
            v = np.array([rng.integers(info.min, info.max, dtype=np_t, endpoint=True)], dtype=np_t)
        else:
            v = (rng.standard_normal(1) * 1e3).astype(np_t)
        key = f"s.{VT_NAME[vt]}"
        ok(lib.kz_gguf_w_scalar(w, key.encode(), int(vt), v.ctypes.data))
        scalars[key] = (vt, v[0])
    ok(lib.kz_gguf_w_str(w, b"general.architecture", b"qwen35"))
    ok(lib.kz_gguf_w_str(w, b"s.text", "h\u00e9llo \u4e16\u754c \"q\"".encode()))
    arrays = {}
    for vt, np_t in NP_OF.items():
        n = int(rng.integers(1, 40))
        if vt == VT.BOOL:
            a = rng.integers(0, 2, n).astype(np.uint8)
        elif np.issubdtype(np_t, np.integer):
            info = np.iinfo(np_t)
            a = rng.integers(info.min, info.max, n, dtype=np_t, endpoint=True)
        else:
            a = rng.standard_normal(n).astype(np_t)
        a = np.ascontiguousarray(a)
        key = f"a.{VT_NAME[vt]}"
        ok(lib.kz_gguf_w_arr(w, key.encode(), int(vt), a.ctypes.data, n))
        arrays[key] = (vt, a)
    toks = ["<|endoftext|>", "", "\u0120the", "\u00e9t\u00e9", "a b\nc", "\U0001F600"] + [f"tok{i}" for i in range(57)]
    enc = [t.encode() for t in toks]
    c_strs = (ctypes.c_char_p * len(enc))(*enc)
    c_lens = (ctypes.c_uint64 * len(enc))(*[len(e) for e in enc])
    ok(lib.kz_gguf_w_arr_str(w, b"tokenizer.ggml.tokens", c_strs, c_lens, len(enc)))

    q8 = gguf.quants.quantize(rng_f32(rng, 3, 64), QT.Q8_0)
    tensors = [
        ("token_embd.weight", QT.F32, rng_f32(rng, 5, 9)),            # ne [9, 5]
        ("blk.0.attn_norm.weight", QT.F16, rng_f32(rng, 11).astype(np.float16)),
        ("blk.0.ffn_up.weight", QT.Q8_0, q8),                        # ne [64, 3]
        ("blk.0.ffn_down.weight", QT.Q4_K, rng.integers(1, 256, (2, 144), dtype=np.uint8)),  # ne [256, 2]
        ("blk.0.ssm_conv1d.weight", QT.F32, rng_f32(rng, 2, 3, 4)),  # ne [4, 3, 2]
    ]
    for name, qt, arr in tensors:
        if arr.dtype == np.uint8:  # quantized rows: bytes -> elements on ne[0]
            bs, ts = gguf.GGML_QUANT_SIZES[qt]
            ne = [arr.shape[-1] // ts * bs] + list(arr.shape[:-1])[::-1]
        else:
            ne = list(arr.shape)[::-1]
        c_ne = (ctypes.c_int64 * 4)(*(ne + [1] * (4 - len(ne))))
        ok(lib.kz_gguf_w_tensor_info(w, name.encode(), len(ne), c_ne, int(qt)))
    path = tmp_path / "ours.gguf"
    ok(lib.kz_gguf_writer_begin(w, str(path).encode()))
    for i, (name, qt, arr) in enumerate(tensors):
        buf = np.ascontiguousarray(arr).tobytes()
        if i == 2:  # streamed in parts
            for s in range(0, len(buf), 13):
                ok(lib.kz_gguf_writer_write_part(w, ctypes.c_char_p(buf[s:s + 13]), len(buf[s:s + 13])))
            ok(lib.kz_gguf_writer_end_tensor(w))
        else:
            ok(lib.kz_gguf_writer_write_tensor(w, ctypes.c_char_p(buf), len(buf)))
    ok(lib.kz_gguf_writer_finish(w))
    lib.kz_gguf_writer_free(w)

    ref = gguf.GGUFReader(str(path))
    assert ref.alignment == 64
    f = ref.fields
    assert f["general.alignment"].types == [VT.UINT32] and f["general.alignment"].contents() == 64
    assert f["general.architecture"].contents() == "qwen35"
    assert f["s.text"].contents() == "h\u00e9llo \u4e16\u754c \"q\""
    for key, (vt, v) in scalars.items():
        assert f[key].types == [vt], key
        got = f[key].contents()
        if vt == VT.BOOL:
            assert got is True
        elif vt in (VT.FLOAT32, VT.FLOAT64):
            assert np.array(got, dtype=NP_OF[vt]).tobytes() == np.array([v]).astype(NP_OF[vt]).tobytes(), key
        else:
            assert int(got) == int(v), key
    for key, (vt, a) in arrays.items():
        assert f[key].types == [VT.ARRAY, vt], key
        got = f[key].contents()
        assert len(got) == len(a), key
        if vt == VT.BOOL:
            assert [bool(x) for x in got] == [bool(x) for x in a], key
        else:
            assert np.array(got, dtype=NP_OF[vt]).tobytes() == a.tobytes(), key
    assert f["tokenizer.ggml.tokens"].types == [VT.ARRAY, VT.STRING]
    assert f["tokenizer.ggml.tokens"].contents() == toks
    n_user = len(scalars) + len(arrays) + 4  # + arch, text, tokens, general.alignment
    assert len([k for k in f if not k.startswith("GGUF.")]) == n_user

    assert [t.name for t in ref.tensors] == [t[0] for t in tensors]
    for t, (name, qt, arr) in zip(ref.tensors, tensors):
        assert t.tensor_type == qt, name
        assert t.data_offset % 64 == 0, name
        assert t.n_bytes == arr.nbytes, name
        assert np.asarray(t.data).tobytes() == np.ascontiguousarray(arr).tobytes(), name
    assert [int(x) for x in ref.tensors[0].shape] == [9, 5]
    assert [int(x) for x in ref.tensors[2].shape] == [64, 3]
    assert [int(x) for x in ref.tensors[3].shape] == [256, 2]
    assert [int(x) for x in ref.tensors[4].shape] == [4, 3, 2]
    np.testing.assert_array_equal(gguf.quants.dequantize(ref.tensors[2].data, QT.Q8_0),
                                  gguf.quants.dequantize(q8, QT.Q8_0))

    # and our own reader (via kazeia info) agrees on the file we wrote
    r = run_info(path)
    assert r.returncode == 0, r.stderr
    _, meta, tinfo = parse_info(r.stdout)
    assert meta["tokenizer.ggml.tokens"][0] == "arr[str]"
    assert [(t[0], t[1], t[2]) for t in tinfo] == [(t.name, t.tensor_type.name, [int(x) for x in t.shape]) for t in ref.tensors]


def test_writer_rejects_misuse(tmp_path):
    lib = load_lib()
    w = lib.kz_gguf_writer_new(0)
    c_ne = (ctypes.c_int64 * 4)(32, 2, 1, 1)
    assert lib.kz_gguf_w_tensor_info(w, b"t", 2, c_ne, int(QT.Q8_0)) == 0
    path = tmp_path / "bad.gguf"
    assert lib.kz_gguf_writer_begin(w, str(path).encode()) == 0
    buf = b"\x01" * 67
    assert lib.kz_gguf_writer_write_tensor(w, ctypes.c_char_p(buf), len(buf)) == -1
    assert "expected 68" in lib.kz_gguf_writer_error(w).decode()
    lib.kz_gguf_writer_free(w)
    assert not path.exists()  # a failed write leaves no file behind
