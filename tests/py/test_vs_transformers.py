"""Converter and engine against Hugging Face transformers.

Converter part (needs no engine): GGUF metadata / tensor names / types / transforms checked (with
kzutil.read_gguf, itself cross-checked against gguf.GGUFReader) against the HF safetensors read
with the `safetensors` package; the Qwen3_5ForConditionalGeneration layout and a BF16 checkpoint convert to the same weights.

Engine part: `kazeia logits` on the converted tiny models vs transformers float32 (eager
attention) on the same ~70 real-text tokens (prefill len-3, then 3 decode steps) and a 500-token
prefill. F32 files must match to 1e-4 relative at every position with identical argmax; the
other types must stay inside bounds measured on these models (kzutil.BOUNDS_*), both against
the float32 model and against transformers run with the GGUF's own rounded weights.
"""
import json
import shutil

import numpy as np
import pytest

import kzutil
from kzutil import ARCHS, TYPES

import gguf
from gguf import GGUFReader, GGMLQuantizationType as QT
from safetensors import safe_open

from kzutil import BOUNDS_HF, BOUNDS_HF_SAME_WEIGHTS  # noqa: E402  (measured numbers are there)
F32_BOUND = 1e-4

EXPECT = {  # metadata of the tiny models (tools/make_tiny_hf.py), spelled out
    "qwen35": {"block_count": 9, "nextn_predict_layers": 1, "embedding_length": 128, "feed_forward_length": 256,
               "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 64,
               "attention.value_length": 64, "rope.dimension_count": 16, "rope.freq_base": 1e7,
               "rope.dimension_sections": [11, 11, 10, 0], "full_attention_interval": 4,
               "ssm.conv_kernel": 4, "ssm.state_size": 32, "ssm.group_count": 2,
               "ssm.time_step_rank": 4, "ssm.inner_size": 128, "context_length": 4096},
    "qwen3": {"block_count": 8, "embedding_length": 128, "feed_forward_length": 256,
              "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 32,
              "attention.value_length": 32, "rope.freq_base": 1e6, "context_length": 4096},
}
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32, "q8_0": 7, "q4_0": 2}
MAT_TYPE = {"f32": QT.F32, "f16": QT.F16, "bf16": QT.BF16, "q8_0": QT.Q8_0, "q4_0": QT.Q4_0}


def expected_tensor_names(arch):
    names = {"token_embd.weight", "output_norm.weight"}
    for i in range(8):
        common = ["attn_norm", "ffn_gate", "ffn_up", "ffn_down"]
        if arch == "qwen3":
            per = common + ["ffn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm", "attn_k_norm"]
        elif (i + 1) % 4 == 0:
            per = common + ["post_attention_norm", "attn_q", "attn_k", "attn_v", "attn_output",
                            "attn_q_norm", "attn_k_norm"]
        else:
            per = common + ["post_attention_norm", "attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha",
                            "ssm_conv1d", "ssm_norm", "ssm_out"]
        names |= {f"blk.{i}.{p}.weight" for p in per}
        if arch == "qwen35" and (i + 1) % 4 != 0:
            names |= {f"blk.{i}.ssm_a", f"blk.{i}.ssm_dt.bias"}
    if arch == "qwen35":  # the MTP block, blk.8, as llama.cpp's converter writes it
        names |= {f"blk.8.{p}.weight" for p in ["attn_norm", "ffn_gate", "ffn_up", "ffn_down", "post_attention_norm",
                                                 "attn_q", "attn_k", "attn_v", "attn_output", "attn_q_norm",
                                                 "attn_k_norm", "nextn.eh_proj", "nextn.enorm", "nextn.hnorm",
                                                 "nextn.shared_head_norm"]}
    return names


def reader_kv(reader, key):
    f = reader.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[-1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8", errors="surrogateescape") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8", errors="surrogateescape")
    return f.parts[f.data[0]].tolist()[0]


_CACHE = {}


def load(path):
    """kzutil.read_gguf, cached per path for the session (checked against GGUFReader below)."""
    path = str(path)
    if path not in _CACHE:
        _CACHE[path] = kzutil.read_gguf(path)
    return _CACHE[path]


def f32_tensors(path):
    _, ts = load(path)
    return {n: kzutil.gguf_f32(e) for n, e in ts.items()}


def hf_tensors(arch):
    d = kzutil.ensure_hf(arch)
    out = {}
    with safe_open(str(d / "model.safetensors"), framework="np") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k)
    return out


# ------------------------------------------------------------------------------------ converter

def test_fast_reader_matches_gguf_reader():
    """The tests read GGUFs with kzutil.read_gguf; it must agree with gguf.GGUFReader."""
    path = kzutil.ensure_gguf("qwen35", "q4_0")
    kv, ts = kzutil.read_gguf(path)
    r = GGUFReader(path)
    assert set(kv) == {k for k in r.fields if not k.startswith("GGUF.")}
    for k in kv:
        want = reader_kv(r, k)
        assert kv[k] == want, k
    assert [t.name for t in r.tensors] == list(ts)
    for t in r.tensors:
        qt, ne, raw = ts[t.name]
        assert qt == t.tensor_type and ne == [int(x) for x in t.shape], t.name
        np.testing.assert_array_equal(np.asarray(raw).reshape(-1), np.asarray(t.data).view(np.uint8).reshape(-1),
                                      err_msg=t.name)


@pytest.mark.parametrize("arch", ARCHS)
def test_convert_metadata_and_names(arch):
    kv, ts = load(kzutil.ensure_gguf(arch, "f32"))
    assert kv["general.architecture"] == arch
    for k, want in EXPECT[arch].items():
        got = kv[f"{arch}.{k}"]
        if isinstance(want, float):
            assert got == pytest.approx(want, rel=1e-6), k
        else:
            assert got == want, k
    assert kv[f"{arch}.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-6, rel=1e-6)
    assert kv["general.file_type"] == 0
    if arch == "qwen3":
        assert "qwen3.nextn_predict_layers" not in kv
    if arch == "qwen3":
        assert "qwen3.rope.dimension_count" not in kv  # llama.cpp default = head_dim
    assert kv["tokenizer.ggml.model"] == "gpt2"
    # both tiny models carry the Qwen3 tokenizer, whose regex is llama.cpp's "qwen2" pre
    assert kv["tokenizer.ggml.pre"] == "qwen2"
    assert len(kv["tokenizer.ggml.tokens"]) == kzutil.N_VOCAB
    names = set(ts)
    want = expected_tensor_names(arch)
    assert names == want, f"missing {sorted(want - names)[:5]} extra {sorted(names - want)[:5]}"
    assert "output.weight" not in names  # tied embeddings


@pytest.mark.parametrize("typ", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_convert_types(arch, typ):
    kv, ts = load(kzutil.ensure_gguf(arch, typ))
    assert kv["general.file_type"] == FILE_TYPE[typ]
    for name, (qt, ne, _) in ts.items():
        small = len(ne) == 1 or name.endswith(("_norm.weight", "ssm_conv1d.weight",
                                               "ssm_alpha.weight", "ssm_beta.weight"))
        want = QT.F32 if small else MAT_TYPE[typ]
        if want in (QT.Q8_0, QT.Q4_0) and ne[0] % 32:
            want = QT.F16
        assert qt == want, f"{name}: {qt.name}, want {want.name}"
    if typ != "f32":  # quantized weights decode back to the f32 file's values
        ref = f32_tensors(kzutil.ensure_gguf(arch, "f32"))
        tol = {"f16": 1e-3, "bf16": 8e-3, "q8_0": 1e-2, "q4_0": 0.15}[typ]
        for name, e in ts.items():
            a, b = kzutil.gguf_f32(e), ref[name]
            assert a.shape == b.shape, name
            err = np.linalg.norm(a - b) / np.linalg.norm(b)
            assert err <= tol, f"{name}: rel err {err:.3g} > {tol}"


def test_convert_qwen35_transforms():
    """Each llama.cpp transform, checked against the raw HF tensors with literal expectations."""
    hf = hf_tensors("qwen35")
    g = f32_tensors(kzutil.ensure_gguf("qwen35", "f32"))
    L = "model.layers"
    np.testing.assert_array_equal(g["token_embd.weight"], hf["model.embed_tokens.weight"])
    # zero-centred RMSNorms get + 1; the gated GDN norm does not
    np.testing.assert_allclose(g["output_norm.weight"], hf["model.norm.weight"] + 1, rtol=0, atol=1e-7)
    np.testing.assert_allclose(g["blk.0.attn_norm.weight"], hf[f"{L}.0.input_layernorm.weight"] + 1, atol=1e-7)
    np.testing.assert_allclose(g["blk.5.post_attention_norm.weight"],
                               hf[f"{L}.5.post_attention_layernorm.weight"] + 1, atol=1e-7)
    np.testing.assert_allclose(g["blk.3.attn_q_norm.weight"], hf[f"{L}.3.self_attn.q_norm.weight"] + 1, atol=1e-7)
    np.testing.assert_allclose(g["blk.7.attn_k_norm.weight"], hf[f"{L}.7.self_attn.k_norm.weight"] + 1, atol=1e-7)
    np.testing.assert_array_equal(g["blk.1.ssm_norm.weight"], hf[f"{L}.1.linear_attn.norm.weight"])
    np.testing.assert_array_equal(g["blk.3.attn_q.weight"], hf[f"{L}.3.self_attn.q_proj.weight"])
    np.testing.assert_array_equal(g["blk.2.ffn_down.weight"], hf[f"{L}.2.mlp.down_proj.weight"])
    # V-head reorder, H_k = 2, H_v = 4 (R = 2): GGUF head n <- HF head [0, 2, 1, 3][n]
    perm = [0, 2, 1, 3]
    hd, kd = 32, 64
    a_log = hf[f"{L}.2.linear_attn.A_log"]
    np.testing.assert_allclose(g["blk.2.ssm_a"], -np.exp(a_log)[perm], rtol=1e-6)
    assert np.all(g["blk.2.ssm_a"] < 0)
    np.testing.assert_array_equal(g["blk.2.ssm_dt.bias"], hf[f"{L}.2.linear_attn.dt_bias"][perm])
    for hfn, gn in (("in_proj_b", "ssm_beta"), ("in_proj_a", "ssm_alpha")):
        np.testing.assert_array_equal(g[f"blk.4.{gn}.weight"], hf[f"{L}.4.linear_attn.{hfn}.weight"][perm])

    def heads(x, axis):  # split V-head blocks of 32 along axis
        return [np.take(x, range(h * hd, (h + 1) * hd), axis=axis) for h in range(4)]
    z = hf[f"{L}.0.linear_attn.in_proj_z.weight"]
    for n in range(4):
        np.testing.assert_array_equal(heads(g["blk.0.attn_gate.weight"], 0)[n], heads(z, 0)[perm[n]])
    qkv = hf[f"{L}.1.linear_attn.in_proj_qkv.weight"]
    gq = g["blk.1.attn_qkv.weight"]
    np.testing.assert_array_equal(gq[:2 * kd], qkv[:2 * kd])  # q, k rows untouched
    for n in range(4):
        np.testing.assert_array_equal(heads(gq[2 * kd:], 0)[n], heads(qkv[2 * kd:], 0)[perm[n]])
    conv = hf[f"{L}.6.linear_attn.conv1d.weight"]  # [256, 1, 4]
    assert conv.shape == (256, 1, 4)
    gc = g["blk.6.ssm_conv1d.weight"]
    assert gc.shape == (256, 4)  # GGUF ne = [4, 256]
    np.testing.assert_array_equal(gc[:2 * kd], conv[:2 * kd, 0, :])
    for n in range(4):
        np.testing.assert_array_equal(heads(gc[2 * kd:], 0)[n], heads(conv[2 * kd:, 0, :], 0)[perm[n]])
    out = hf[f"{L}.5.linear_attn.out_proj.weight"]  # [128 (d), 128 (value_dim)]: columns reorder
    for n in range(4):
        np.testing.assert_array_equal(heads(g["blk.5.ssm_out.weight"], 1)[n], heads(out, 1)[perm[n]])
    # the reorder is a real permutation here (the test would pass vacuously otherwise)
    assert not np.array_equal(g["blk.5.ssm_out.weight"], out)


def test_convert_qwen3_plain_norms():
    hf = hf_tensors("qwen3")
    g = f32_tensors(kzutil.ensure_gguf("qwen3", "f32"))
    np.testing.assert_array_equal(g["output_norm.weight"], hf["model.norm.weight"])
    np.testing.assert_array_equal(g["blk.0.ffn_norm.weight"], hf["model.layers.0.post_attention_layernorm.weight"])
    np.testing.assert_array_equal(g["blk.4.attn_q_norm.weight"], hf["model.layers.4.self_attn.q_norm.weight"])
    np.testing.assert_array_equal(g["blk.4.attn_k.weight"], hf["model.layers.4.self_attn.k_proj.weight"])


def test_convert_vlm_layout_matches(tmp_path):
    """Qwen3_5ForConditionalGeneration layout (text_config, model.language_model.*, vision tensor,
    two shards + index) converts to exactly the same tensors and keys."""
    src = kzutil.ensure_hf_vlm()
    assert json.loads((src / "config.json").read_text())["architectures"] == ["Qwen3_5ForConditionalGeneration"]
    out = kzutil.ensure_gguf("qwen35", "q8_0", src=src, out=kzutil.MODELS / "gguf" / "qwen35-tiny-vlm-q8_0.gguf")
    ka, ta = load(out)
    kb, tb = load(kzutil.ensure_gguf("qwen35", "q8_0"))
    assert list(ta) == list(tb)
    for n in ta:
        assert ta[n][0] == tb[n][0] and ta[n][1] == tb[n][1], n
        np.testing.assert_array_equal(np.asarray(ta[n][2]), np.asarray(tb[n][2]), err_msg=n)
    ka = {k: v for k, v in ka.items() if k != "general.name"}
    kb = {k: v for k, v in kb.items() if k != "general.name"}
    assert ka == kb


def test_convert_bf16_checkpoint(tmp_path):
    """Real checkpoints are BF16 (which numpy cannot load): converting a BF16 copy must give the
    BF16-rounded weights exactly."""
    import torch
    from safetensors.torch import load_file, save_file
    src = kzutil.ensure_hf("qwen3")
    d = tmp_path / "qwen3-bf16"
    d.mkdir()
    sd = load_file(str(src / "model.safetensors"))
    save_file({k: v.to(torch.bfloat16) for k, v in sd.items()}, str(d / "model.safetensors"), metadata={"format": "pt"})
    for f in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(src / f, d / f)
    import convert_hf
    out = convert_hf.convert(str(d), str(tmp_path / "o.gguf"), "f32", verbose=False)
    g = f32_tensors(out)
    for hfn, gn in (("model.embed_tokens.weight", "token_embd.weight"),
                    ("model.layers.2.self_attn.v_proj.weight", "blk.2.attn_v.weight"),
                    ("model.layers.7.mlp.down_proj.weight", "blk.7.ffn_down.weight"),
                    ("model.norm.weight", "output_norm.weight")):
        want = sd[hfn].to(torch.bfloat16).float().numpy()
        np.testing.assert_array_equal(g[gn], want, err_msg=gn)


def test_convert_tensor_type_override(tmp_path):
    import convert_hf
    out = convert_hf.convert(str(kzutil.ensure_hf("qwen3")), str(tmp_path / "o.gguf"), "f16", verbose=False,
                             tensor_types=[r"blk\.0\.attn_q\.=q4_0", "norm=q8_0", "ffn_down=f32"])
    _, ts = load(out)
    assert ts["blk.0.attn_q.weight"][0] == QT.Q4_0
    assert ts["blk.1.attn_q.weight"][0] == QT.F16
    assert ts["blk.3.ffn_down.weight"][0] == QT.F32
    assert ts["blk.3.attn_q_norm.weight"][0] == QT.F32  # 1-D always F32
    with pytest.raises(convert_hf.ConvertError, match="REGEX=TYPE"):
        convert_hf.convert(str(kzutil.ensure_hf("qwen3")), str(tmp_path / "p.gguf"), "f16", verbose=False,
                           tensor_types=["ffn_down=q5_k"])


def test_convert_sampling_keys(tmp_path):
    """generation_config.json -> llama.cpp's general.sampling.* keys (read back with gguf-py), and
    the engine samples with them by default: `kazeia run` on the file equals the same run with the
    values given as options; do_sample false -> greedy; options given win over the file."""
    import convert_hf
    src = kzutil.ensure_hf("qwen3")

    def checkpoint(name, gc_text):
        d = tmp_path / name
        d.mkdir()
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
            (d / f).symlink_to(src / f)
        if gc_text is not None:
            (d / "generation_config.json").write_text(gc_text)
        return str(d)

    outs = {}
    for name, gc in (("samp", {"do_sample": True, "temperature": 1.3, "top_k": 7, "top_p": 0.9,
                               "repetition_penalty": 1.2}),
                     ("greedy", {"do_sample": False, "temperature": 0.9}), ("none", None)):
        d = checkpoint(name, None if gc is None else json.dumps(gc))
        outs[name] = convert_hf.convert(d, str(tmp_path / f"{name}.gguf"), "q8_0", verbose=False)
    r = gguf.GGUFReader(outs["samp"])
    got = {k: reader_kv(r, k) for k in r.fields if k.startswith("general.sampling.")}
    assert got.keys() == {"general.sampling.temp", "general.sampling.top_k", "general.sampling.top_p",
                          "general.sampling.penalty_repeat"}
    assert got["general.sampling.top_k"] == 7
    for k, v in (("temp", 1.3), ("top_p", 0.9), ("penalty_repeat", 1.2)):
        assert abs(got["general.sampling." + k] - v) < 1e-6, k
    r = gguf.GGUFReader(outs["greedy"])
    assert {k: reader_kv(r, k) for k in r.fields if k.startswith("general.sampling.")} == {"general.sampling.temp": 0.0}
    assert not any(k.startswith("general.sampling.") for k in gguf.GGUFReader(outs["none"]).fields)

    def gen(path, *opts):
        return kzutil.run([kzutil.require_kazeia(), "run", "-m", path, "-p", "Count to ten", "-n", 24, "--seed", 5,
                           "--no-think", "-t", kzutil.THREADS, *opts]).stdout
    as_file = gen(outs["samp"])
    assert as_file == gen(outs["none"], "--temp", 1.3, "--top-k", 7, "--top-p", 0.9, "--repeat-penalty", 1.2)
    assert as_file != gen(outs["none"])  # the keys changed something
    assert gen(outs["greedy"]) == gen(outs["none"], "--temp", 0)
    assert gen(outs["samp"], "--temp", 0, "--repeat-penalty", 1) == gen(outs["none"], "--temp", 0)
    bad = checkpoint("bad", "{not json")
    with pytest.raises(convert_hf.ConvertError, match="generation_config.json"):
        convert_hf.convert(bad, str(tmp_path / "bad.gguf"), "q8_0", verbose=False)
    assert not (tmp_path / "bad.gguf").exists()


def test_convert_untied_head(tmp_path):
    """tie_word_embeddings false + lm_head.weight -> output.weight (as in Qwen3.5-9B)."""
    import torch
    from safetensors.torch import load_file, save_file
    import convert_hf
    src = kzutil.ensure_hf("qwen3")
    d = tmp_path / "untied"
    d.mkdir()
    sd = load_file(str(src / "model.safetensors"))
    head = torch.randn(sd["model.embed_tokens.weight"].shape, generator=torch.Generator().manual_seed(1))
    sd["lm_head.weight"] = head
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    cfg = json.loads((src / "config.json").read_text())
    cfg["tie_word_embeddings"] = False
    (d / "config.json").write_text(json.dumps(cfg))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(src / f, d / f)
    g = f32_tensors(convert_hf.convert(str(d), str(tmp_path / "u.gguf"), "f32", verbose=False))
    np.testing.assert_array_equal(g["output.weight"], head.numpy())
    # flag says tied but the stored head differs: keep it rather than silently dropping it
    cfg["tie_word_embeddings"] = True
    (d / "config.json").write_text(json.dumps(cfg))
    g = f32_tensors(convert_hf.convert(str(d), str(tmp_path / "v.gguf"), "f32", verbose=False))
    assert "output.weight" in g
    del cfg["tie_word_embeddings"]  # untied by default, and now no head at all -> error
    (d / "config.json").write_text(json.dumps(cfg))
    del sd["lm_head.weight"]
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(convert_hf.ConvertError, match="lm_head"):
        convert_hf.convert(str(d), str(tmp_path / "w.gguf"), "f32", verbose=False)


def test_convert_rejects_bad_input(tmp_path):
    import convert_hf
    src = kzutil.ensure_hf("qwen3")
    d = tmp_path / "bad"
    d.mkdir()
    cfg = json.loads((src / "config.json").read_text())
    cfg["architectures"] = ["LlamaForCausalLM"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(convert_hf.ConvertError, match="LlamaForCausalLM"):
        convert_hf.convert(str(d), str(tmp_path / "x.gguf"), "f32", verbose=False)
    cfg["architectures"] = ["Qwen3ForCausalLM"]
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(convert_hf.ConvertError, match="safetensors"):
        convert_hf.convert(str(d), str(tmp_path / "x.gguf"), "f32", verbose=False)
    (d / "model.safetensors").write_bytes(b"\xff" * 16)  # header length far beyond the file
    with pytest.raises(convert_hf.ConvertError, match="header"):
        convert_hf.convert(str(d), str(tmp_path / "x.gguf"), "f32", verbose=False)
    # a checkpoint missing one tensor is refused with its name
    from safetensors.torch import load_file, save_file
    sd = load_file(str(src / "model.safetensors"))
    del sd["model.layers.5.self_attn.k_norm.weight"]
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    shutil.copyfile(src / "tokenizer.json", d / "tokenizer.json")
    shutil.copyfile(src / "tokenizer_config.json", d / "tokenizer_config.json")
    with pytest.raises(convert_hf.ConvertError, match=r"model\.layers\.5\.self_attn\.k_norm\.weight"):
        convert_hf.convert(str(d), str(tmp_path / "x.gguf"), "f32", verbose=False)
    # layer kinds in the config must match the tensors
    q35 = kzutil.ensure_hf("qwen35")
    e = tmp_path / "swapped"
    e.mkdir()
    cfg35 = json.loads((q35 / "config.json").read_text())
    cfg35["layer_types"] = ["full_attention" if (i + 1) % 2 == 0 else "linear_attention" for i in range(8)]
    (e / "config.json").write_text(json.dumps(cfg35))
    for f in ("model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        (e / f).symlink_to(q35 / f)
    with pytest.raises(convert_hf.ConvertError, match=r"layer 1 \(attention\): missing model\.layers\.1\.self_attn"):
        convert_hf.convert(str(e), str(tmp_path / "x.gguf"), "f32", verbose=False)
    with pytest.raises(convert_hf.ConvertError, match="--type"):
        convert_hf.convert(str(src), str(tmp_path / "x.gguf"), "q5_k", verbose=False)
    assert not (tmp_path / "x.gguf").exists()


# ------------------------------------------------------------------------------------ engine

def _check_margins(ref, min_gap):
    """The comparison is only meaningful if the reference has no near-ties at the top."""
    s = np.sort(ref, axis=1)
    gap = s[:, -1] - s[:, -2]
    assert gap.min() > min_gap, f"reference top-2 gap {gap.min():.2e} at {gap.argmin()}: regenerate the tiny model"


@pytest.mark.parametrize("arch", ARCHS)
def test_f32_vs_transformers(arch, report):
    toks = kzutil.tokens_short()
    ref = kzutil.hf_logits(arch, toks)
    _check_margins(ref, 1e-3)
    g = kzutil.ensure_gguf(arch, "f32")
    for prefill, what in ((len(toks) - 3, f"prefill {len(toks) - 3} + 3 dec"), (1, "1 + all decode")):
        ours = kzutil.kz_logits(g, toks, prefill=prefill)
        rel = kzutil.rel_err(ours, ref)
        report.add("vs-hf", arch, "f32", what, rel.max(), rel.mean(), kzutil.top1(ours, ref), len(toks), F32_BOUND)
        bad = np.nonzero(rel > F32_BOUND)[0]
        assert bad.size == 0, f"{what}: rel err > {F32_BOUND} at positions {bad[:10].tolist()} (max {rel.max():.3e})"
        am, ar = ours.argmax(1), ref.argmax(1)
        assert np.array_equal(am, ar), f"{what}: argmax differs at {np.nonzero(am != ar)[0][:10].tolist()}"


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill500_vs_transformers(arch, report):
    toks = kzutil.tokens_long(500)
    ref = kzutil.hf_logits(arch, toks)
    _check_margins(ref, 2e-4)
    ours = kzutil.kz_logits(kzutil.ensure_gguf(arch, "f32"), toks, prefill=len(toks))
    rel = kzutil.rel_err(ours, ref)
    report.add("vs-hf", arch, "f32", "prefill 500", rel.max(), rel.mean(), kzutil.top1(ours, ref), len(toks), F32_BOUND)
    bad = np.nonzero(rel > F32_BOUND)[0]
    assert bad.size == 0, f"rel err > {F32_BOUND} at positions {bad[:10].tolist()} (max {rel.max():.3e})"
    am, ar = ours.argmax(1), ref.argmax(1)
    assert np.array_equal(am, ar), f"argmax differs at {np.nonzero(am != ar)[0][:10].tolist()}"


@pytest.mark.parametrize("typ", [t for t in TYPES if t != "f32"])
@pytest.mark.parametrize("arch", ARCHS)
def test_quantized_vs_transformers(arch, typ, report):
    toks = kzutil.tokens_short()
    ref = kzutil.hf_logits(arch, toks)
    ours = kzutil.kz_logits(kzutil.ensure_gguf(arch, typ), toks, prefill=len(toks) - 3)
    rel = kzutil.rel_err(ours, ref)
    t1 = kzutil.top1(ours, ref)
    mx, mean, top = BOUNDS_HF[arch][typ]
    report.add("vs-hf", arch, typ, f"prefill {len(toks) - 3} + 3 dec", rel.max(), rel.mean(), t1, len(toks), mx)
    assert rel.max() <= mx and rel.mean() <= mean and t1 >= top, \
        f"{arch} {typ}: max rel {rel.max():.3e} (<= {mx}), mean {rel.mean():.3e} (<= {mean}), top1 {t1:.3f} (>= {top})"


@pytest.mark.parametrize("typ", [t for t in TYPES if t != "f32"])
@pytest.mark.parametrize("arch", ARCHS)
def test_quantized_vs_transformers_same_weights(arch, typ, report):
    """transformers run with the GGUF's own rounded weights: what is left is activation rounding
    (engines round matmul inputs to the weight's dot-product type), so the bound is much tighter
    than against the float32 model and catches subtle kernel errors (scales, offsets)."""
    toks = kzutil.tokens_short()
    ref = kzutil.hf_logits(arch, toks, weights=typ)
    ours = kzutil.kz_logits(kzutil.ensure_gguf(arch, typ), toks, prefill=len(toks) - 3)
    rel = kzutil.rel_err(ours, ref)
    t1 = kzutil.top1(ours, ref)
    mx, mean, top = BOUNDS_HF_SAME_WEIGHTS[arch][typ]
    report.add("vs-hf-sameW", arch, typ, f"prefill {len(toks) - 3} + 3 dec", rel.max(), rel.mean(), t1, len(toks), mx)
    assert rel.max() <= mx and rel.mean() <= mean and t1 >= top, \
        f"{arch} {typ}: max rel {rel.max():.3e} (<= {mx}), mean {rel.mean():.3e} (<= {mean}), top1 {t1:.3f} (>= {top})"


@pytest.mark.parametrize("arch", ARCHS)
def test_kv_f16_vs_transformers(arch, report):
    """F16 KV cache on F32 weights: only K/V rounding differs (attention layers only in qwen35)."""
    toks = kzutil.tokens_short()
    ref = kzutil.hf_logits(arch, toks)
    ours = kzutil.kz_logits(kzutil.ensure_gguf(arch, "f32"), toks, prefill=len(toks) - 3, kv="f16")
    rel = kzutil.rel_err(ours, ref)
    report.add("vs-hf", arch, "f32", "kv f16", rel.max(), rel.mean(), kzutil.top1(ours, ref), len(toks), 2e-3)
    assert rel.max() <= 2e-3, f"max rel {rel.max():.3e}"  # measured 1.4e-4 (qwen35), 6.6e-4 (qwen3)
    assert kzutil.top1(ours, ref) >= 0.97
