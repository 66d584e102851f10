"""kz-mkmodel end to end: files read back with gguf.GGUFReader have exactly the keys and the
tensor names / shapes / types that llama.cpp's converter writes (expected values computed
here from docs/qwen35.md (model sizes, tensors, Qwen3 dense), independently of the C code), llama.cpp (llama-cpp-python)
loads them and produces finite, non-degenerate logits, and --vocab copies a real tokenizer
(padded to n_vocab) such that llama.cpp tokenizes like HF tokenizers."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import gguf
import kzutil
from gguf import GGMLQuantizationType as QT

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("KZ_BUILD", "build")
MK = BUILD / "kz-mkmodel"
QWEN3_TOK = Path(os.environ.get("KZ_SHARED", ROOT.parent / "shared")) / "data" / "qwen3-tokenizer"

PRESETS = {  # docs/qwen35.md#model-sizes and #qwen3-dense
    "qwen35-0.8b": dict(arch="qwen35", L=24, d=1024, ff=3584, H=8, Hkv=2, hd=256, rot=64, Hk=16, Hv=16, inner=2048, state=128, conv=4, vocab=248320, tied=True, ctx=262144, base=1e7),
    "qwen35-2b": dict(arch="qwen35", L=24, d=2048, ff=6144, H=8, Hkv=2, hd=256, rot=64, Hk=16, Hv=16, inner=2048, state=128, conv=4, vocab=248320, tied=True, ctx=262144, base=1e7),
    "qwen35-4b": dict(arch="qwen35", L=32, d=2560, ff=9216, H=16, Hkv=4, hd=256, rot=64, Hk=16, Hv=32, inner=4096, state=128, conv=4, vocab=248320, tied=True, ctx=262144, base=1e7),
    "qwen35-9b": dict(arch="qwen35", L=32, d=4096, ff=12288, H=16, Hkv=4, hd=256, rot=64, Hk=16, Hv=32, inner=4096, state=128, conv=4, vocab=248320, tied=False, ctx=262144, base=1e7),
    "qwen3-4b": dict(arch="qwen3", L=36, d=2560, ff=9728, H=32, Hkv=8, hd=128, rot=128, vocab=151936, tied=True, ctx=40960, base=1e6),
    "qwen35-tiny": dict(arch="qwen35", L=8, d=256, ff=512, H=4, Hkv=2, hd=64, rot=16, Hk=2, Hv=4, inner=128, state=32, conv=4, vocab=512, tied=True, ctx=262144, base=1e7),
    "qwen3-tiny": dict(arch="qwen3", L=8, d=256, ff=512, H=4, Hkv=2, hd=64, rot=64, vocab=512, tied=True, ctx=40960, base=1e6),
}
FTYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 7, "bf16": 32}


def mk(tmp_path, name, *args):
    assert MK.exists(), f"{MK} not built"
    out = tmp_path / name
    r = subprocess.run([str(MK), *args, "-o", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    return out, r.stderr


def expected_tensors(p, wtype, nextn=0):
    """name -> (shape in GGUF ne order, type)"""
    mt = QT[wtype.upper()]
    F32 = QT.F32
    d, hd = p["d"], p["hd"]
    t = {"token_embd.weight": ([d, p["vocab"]], mt), "output_norm.weight": ([d], F32)}
    if not p["tied"]:
        t["output.weight"] = ([d, p["vocab"]], mt)
    q35 = p["arch"] == "qwen35"
    for il in range(p["L"] + nextn):
        b = f"blk.{il}."
        t[b + "attn_norm.weight"] = ([d], F32)
        t[b + "ffn_gate.weight"] = ([d, p["ff"]], mt)
        t[b + "ffn_up.weight"] = ([d, p["ff"]], mt)
        t[b + "ffn_down.weight"] = ([p["ff"], d], mt)
        if not q35:
            t[b + "ffn_norm.weight"] = ([d], F32)
            t[b + "attn_q.weight"] = ([d, p["H"] * hd], mt)
        else:
            t[b + "post_attention_norm.weight"] = ([d], F32)
        attn = not q35 or il >= p["L"] or (il + 1) % 4 == 0
        if attn:
            if q35:
                t[b + "attn_q.weight"] = ([d, 2 * p["H"] * hd], mt)
            t[b + "attn_k.weight"] = ([d, p["Hkv"] * hd], mt)
            t[b + "attn_v.weight"] = ([d, p["Hkv"] * hd], mt)
            t[b + "attn_output.weight"] = ([p["H"] * hd, d], mt)
            t[b + "attn_q_norm.weight"] = ([hd], F32)
            t[b + "attn_k_norm.weight"] = ([hd], F32)
        else:
            conv_dim = 2 * p["Hk"] * p["state"] + p["inner"]
            t[b + "attn_qkv.weight"] = ([d, conv_dim], mt)
            t[b + "attn_gate.weight"] = ([d, p["inner"]], mt)
            t[b + "ssm_conv1d.weight"] = ([p["conv"], conv_dim], F32)
            t[b + "ssm_dt.bias"] = ([p["Hv"]], F32)
            t[b + "ssm_a"] = ([p["Hv"]], F32)
            t[b + "ssm_beta.weight"] = ([d, p["Hv"]], F32)
            t[b + "ssm_alpha.weight"] = ([d, p["Hv"]], F32)
            t[b + "ssm_norm.weight"] = ([p["inner"] // p["Hv"]], F32)
            t[b + "ssm_out.weight"] = ([p["inner"], d], mt)
        if q35 and il >= p["L"]:
            t[b + "nextn.eh_proj.weight"] = ([2 * d, d], mt)
            for n in ("enorm", "hnorm", "shared_head_norm"):
                t[b + f"nextn.{n}.weight"] = ([d], F32)
    return t


def expected_kvs(p, wtype, nextn=0):
    a = p["arch"]
    kv = {
        "general.architecture": a, "general.type": "model", "general.file_type": FTYPE[wtype],
        "general.quantization_version": 2,
        f"{a}.block_count": p["L"] + nextn, f"{a}.context_length": p["ctx"], f"{a}.embedding_length": p["d"],
        f"{a}.feed_forward_length": p["ff"], f"{a}.attention.head_count": p["H"],
        f"{a}.attention.head_count_kv": p["Hkv"], f"{a}.attention.key_length": p["hd"],
        f"{a}.attention.value_length": p["hd"], f"{a}.rope.freq_base": p["base"],
        f"{a}.attention.layer_norm_rms_epsilon": np.float32(1e-6),
    }
    if a == "qwen35":
        half = p["rot"] // 2
        s0 = (11 * half + 16) // 32
        kv.update({
            f"{a}.rope.dimension_count": p["rot"], f"{a}.rope.dimension_sections": [s0, s0, half - 2 * s0, 0],
            f"{a}.full_attention_interval": 4, f"{a}.ssm.conv_kernel": p["conv"], f"{a}.ssm.state_size": p["state"],
            f"{a}.ssm.group_count": p["Hk"], f"{a}.ssm.time_step_rank": p["Hv"], f"{a}.ssm.inner_size": p["inner"],
        })
        if nextn:
            kv[f"{a}.nextn_predict_layers"] = nextn
    return kv


def check_file(path, p, wtype, nextn=0, vocab_keys=None):
    r = gguf.GGUFReader(str(path))
    kv = expected_kvs(p, wtype, nextn)
    tok_keys = {k for k in r.fields if k.startswith("tokenizer.")}
    model_keys = {k for k in r.fields if not k.startswith("GGUF.") and not k.startswith("tokenizer.")}
    assert model_keys == set(kv) | {"general.name"}, sorted(model_keys ^ (set(kv) | {"general.name"}))
    for k, v in kv.items():
        got = r.fields[k].contents()
        if isinstance(v, float) or isinstance(v, np.floating):
            assert np.float32(got) == np.float32(v), (k, got, v)
        else:
            assert got == v, (k, got, v)
    if vocab_keys is None:
        vocab_keys = {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens",
                      "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.eos_token_id",
                      "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token"}
        if p["arch"] == "qwen3":
            vocab_keys.add("tokenizer.ggml.bos_token_id")
    assert tok_keys == vocab_keys
    assert len(r.fields["tokenizer.ggml.tokens"].data) == p["vocab"]
    assert len(r.fields["tokenizer.ggml.token_type"].data) == p["vocab"]
    exp = expected_tensors(p, wtype, nextn)
    got = {t.name: ([int(x) for x in t.shape], t.tensor_type) for t in r.tensors}
    assert set(got) == set(exp), sorted(set(got) ^ set(exp))
    for n, (shape, ty) in exp.items():
        assert got[n][0] == shape, (n, got[n][0], shape)
        assert got[n][1] == ty, (n, got[n][1], ty)
    return r


@pytest.mark.parametrize("preset,wtype", [("qwen35-tiny", "q4_0"), ("qwen35-tiny", "f16"), ("qwen3-tiny", "q8_0"),
                                          ("qwen3-tiny", "bf16"), ("qwen35-tiny", "f32")])
def test_tiny_keys_tensors_and_values(tmp_path, preset, wtype):
    p = PRESETS[preset]
    out, _ = mk(tmp_path, "m.gguf", "--preset", preset, "--type", wtype, "--seed", "7")
    r = check_file(out, p, wtype)
    toks = r.fields["tokenizer.ggml.tokens"].contents()
    types = r.fields["tokenizer.ggml.token_type"].contents()
    assert toks[0] == "!" and toks[255] == "\u0143" and toks[256:261] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
    assert types[:256] == [1] * 256 and types[256:261] == [3, 3, 3, 4, 4] and set(types[261:]) == {5}
    assert toks[261] == "[PAD261]"
    assert r.fields["tokenizer.ggml.pre"].contents() == ("qwen35" if p["arch"] == "qwen35" else "qwen2")
    assert r.fields["tokenizer.ggml.eos_token_id"].contents() == 258
    # weight statistics via gguf's own dequantizer
    by = {t.name: t for t in r.tensors}

    def deq(name):
        t = by[name]
        return gguf.quants.dequantize(t.data, t.tensor_type).reshape(-1)

    w = deq("blk.0.ffn_up.weight")
    assert abs(w.std() * np.sqrt(p["d"]) - 1) < 0.1 and abs(w.mean()) < 0.01
    w = deq("blk.0.ffn_down.weight")  # residual-branch output: std / sqrt(2 n_layer)
    assert abs(w.std() * np.sqrt(p["ff"]) * np.sqrt(2 * p["L"]) - 1) < 0.1
    nrm = deq("output_norm.weight")
    assert 0.95 < nrm.mean() < 1.05 and 0.05 < nrm.std() < 0.15
    if p["arch"] == "qwen35":
        a = deq("blk.0.ssm_a")
        assert np.all(a < -0.36) and np.all(a > -2.72)
        c = deq("blk.0.ssm_conv1d.weight")
        assert 0 < c.std() < 0.5


@pytest.mark.parametrize("preset", ["qwen35-0.8b", "qwen35-2b", "qwen35-4b", "qwen35-9b", "qwen3-4b"])
def test_real_presets_keys(tmp_path, preset):
    """real presets, shrunk to one block and a small vocab so the test stays fast: every key
    value and the per-layer shapes of that block are the real ones"""
    p = dict(PRESETS[preset], L=1, vocab=512)
    out, _ = mk(tmp_path, "m.gguf", "--preset", preset, "--type", "q4_0", "--n-layer", "1", "--n-vocab", "512")
    check_file(out, p, "q4_0")


def test_nextn_untied_and_fallback(tmp_path):
    p = dict(PRESETS["qwen35-tiny"], tied=False)
    out, _ = mk(tmp_path, "m.gguf", "--preset", "qwen35-tiny", "--type", "q8_0", "--untied", "--nextn", "1")
    check_file(out, p, "q8_0", nextn=1)
    # n_ff = 300 is not a multiple of 32: ffn_down falls back to F16 (and says so)
    out, err = mk(tmp_path, "f.gguf", "--preset", "qwen35-tiny", "--type", "q4_0", "--n-ff", "300")
    assert "ffn_down.weight: row length 300" in err and "F16" in err
    r = gguf.GGUFReader(str(out))
    ty = {t.name: t.tensor_type for t in r.tensors}
    assert ty["blk.0.ffn_down.weight"] == QT.F16 and ty["blk.0.ffn_up.weight"] == QT.Q4_0


def test_deterministic_and_bad_args(tmp_path):
    a, _ = mk(tmp_path, "a.gguf", "--preset", "qwen3-tiny", "--type", "q4_0", "--threads", "1")
    b, _ = mk(tmp_path, "b.gguf", "--preset", "qwen3-tiny", "--type", "q4_0", "--threads", "3")
    assert a.read_bytes() == b.read_bytes()
    for args, needle in [(["--type", "iq2_xxs"], "--type"), (["--preset", "nope"], "unknown preset"),
                         (["--arch", "qwen3", "--preset", "qwen35-tiny"], "arch"), (["--n-head-kv", "3"], "n_head_kv"),
                         (["--n-embd", "x"], "--n-embd")]:
        r = subprocess.run([str(MK), *args, "-o", str(tmp_path / "bad.gguf")], capture_output=True, text=True)
        assert r.returncode != 0 and needle in r.stderr, (args, r.stderr)
        assert not (tmp_path / "bad.gguf").exists()


def llama_logits(path, toks):
    m = kzutil.lc_llama(path, n_ctx=128, logits_all=True, verbose=False, n_threads=2)
    m.eval(toks)
    return m, np.array(m.scores[: len(toks)])


@pytest.mark.parametrize("preset,wtype,extra", [("qwen35-tiny", "q4_0", []), ("qwen35-tiny", "bf16", ["--untied", "--nextn", "1"]),
                                                ("qwen3-tiny", "q8_0", []), ("qwen3-tiny", "f16", ["--untied"])])
def test_llama_cpp_loads_and_runs(tmp_path, preset, wtype, extra):
    out, _ = mk(tmp_path, "m.gguf", "--preset", preset, "--type", wtype, *extra)
    toks = [1, 5, 40, 257, 100, 7, 8, 9, 300, 42]
    m, lg = llama_logits(out, toks)
    assert m.n_vocab() == 512
    assert np.isfinite(lg).all()
    sd = lg.std(axis=1)
    assert np.all(sd > 0.3) and np.all(sd < 5), sd          # neither flat nor saturated
    assert len(set(lg.argmax(axis=1).tolist())) >= 4         # predictions depend on the input


def test_same_seed_types_agree(tmp_path):
    """the same seed gives the same model in every type: llama.cpp logits of the other types
    stay close to the f32 file's (relative RMS; unrelated logits would give ~1.4). Measured:
    f16 ~0.002, bf16 ~0.02, q8_0 ~0.06 (qwen3 ~0.04), q4_0 ~0.6 (random weights have no
    redundancy, and Q4_0 adds ~7% noise per weight)."""
    toks = [3, 17, 99, 256, 400, 12, 12, 7]
    for preset in ("qwen35-tiny", "qwen3-tiny"):
        ref = None
        for wtype, tol in [("f32", 0), ("f16", 0.01), ("bf16", 0.06), ("q8_0", 0.15), ("q4_0", 0.9)]:
            out, _ = mk(tmp_path, f"{wtype}.gguf", "--preset", preset, "--type", wtype, "--seed", "3")
            _, lg = llama_logits(out, toks)
            if ref is None:
                ref = lg
                continue
            rel = np.linalg.norm(lg - ref) / np.linalg.norm(ref)
            assert rel < tol, (preset, wtype, rel)


def read_kvs(path):
    """minimal GGUF v3 kv reader (gguf.GGUFReader needs ~15 s for a 150k-token vocab)"""
    import struct
    b = Path(path).read_bytes()
    assert b[:4] == b"GGUF" and struct.unpack_from("<I", b, 4)[0] == 3
    n_kv = struct.unpack_from("<Q", b, 16)[0]
    pos = 24
    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def rstr(p):
        n = struct.unpack_from("<Q", b, p)[0]
        return b[p + 8:p + 8 + n].decode("utf-8"), p + 8 + n

    def rval(t, p):
        if t == 8:
            return rstr(p)
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            if et == 8:
                out = []
                for _ in range(n):
                    v, p = rstr(p)
                    out.append(v)
                return out, p
            f = scal[et]
            return list(struct.unpack_from(f"<{n}{f}", b, p)), p + n * struct.calcsize(f)
        f = scal[t]
        return struct.unpack_from("<" + f, b, p)[0], p + struct.calcsize(f)

    kv = {}
    for _ in range(n_kv):
        k, pos = rstr(pos)
        t = struct.unpack_from("<I", b, pos)[0]
        kv[k], pos = rval(t, pos + 4)
    return kv


def test_vocab_file_copied_and_padded(tmp_path):
    from tokenizers import Tokenizer
    vocab = tmp_path / "qwen3-vocab.gguf"
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "convert_tokenizer.py"), str(QWEN3_TOK), str(vocab), "--pre", "qwen2"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    src = {k: v for k, v in read_kvs(vocab).items() if k.startswith("tokenizer.")}
    n_src = len(src["tokenizer.ggml.tokens"])
    assert n_src > 150000 and "tokenizer.ggml.merges" in src
    hf = Tokenizer.from_file(str(QWEN3_TOK / "tokenizer.json"))
    text = "Hello world! <|im_start|>user\nWhat's 12345 plus \u00fcn\u00efc\u00f6d\u00e9?<|im_end|>\n"
    for name, args, n_vocab in [("t.gguf", ["--preset", "qwen3-tiny"], n_src),
                                ("p.gguf", ["--preset", "qwen3-tiny", "--n-vocab", "151936"], 151936)]:
        out, _ = mk(tmp_path, name, *args, "--type", "q8_0", "--vocab", str(vocab))
        kv = read_kvs(out)
        assert {k for k in kv if k.startswith("tokenizer.")} == set(src)
        dt, dtt = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
        assert len(dt) == n_vocab and len(dtt) == n_vocab
        assert dt[:n_src] == src["tokenizer.ggml.tokens"] and dtt[:n_src] == src["tokenizer.ggml.token_type"]
        assert dt[n_src:] == [f"[PAD{i}]" for i in range(n_src, n_vocab)] and set(dtt[n_src:]) <= {5}
        for k in set(src) - {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"}:
            assert kv[k] == src[k], k
        assert kv["qwen3.embedding_length"] == 256 and kv["general.architecture"] == "qwen3"
        m = kzutil.lc_llama(out, n_ctx=64, verbose=False, n_threads=1)
        assert m.n_vocab() == n_vocab
        assert m.tokenize(text.encode(), add_bos=False, special=True) == hf.encode(text).ids
    # a vocab larger than --n-vocab is refused
    r = subprocess.run([str(MK), "--preset", "qwen3-tiny", "--n-vocab", "1000", "--vocab", str(vocab), "-o", str(tmp_path / "x.gguf")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "more than n_vocab" in r.stderr
