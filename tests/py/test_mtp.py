"""MTP (multi-token prediction) block: converter export and the engine's draft head.

Converter: the tiny Qwen3.5 checkpoint (tools/make_tiny_hf.py writes a random mtp.* block with
the names real checkpoints use) converts with the block as llama.cpp's converter writes it
(blk.8.*, nextn.*, norms + 1, block_count 9, nextn_predict_layers 1), values checked against
the safetensors; --no-mtp drops it; the VLM layout gives the same file; llama.cpp loads it.

Engine: draft logits from kz_seq_mtp_draft (ctypes on libkazeia_dev.so, F32 GGUF) against an
independent torch implementation of the block, written here from the formula
    u = fc [rmsnorm(embed(x_{t+1}), pre_fc_norm_embedding); rmsnorm(h_t, pre_fc_norm_hidden)]
    u += o_proj(attn(q, k, v) * sigmoid(gate))      gated attention over the shifted pairs,
                                                     q/k RMSNorm, partial NEOX rope at t + 1
    u += down(silu(gate_proj) * up_proj)             on rmsnorm(u, post_attention_layernorm)
    logits = lm_head(rmsnorm(u, mtp.norm))
on the HF weights and transformers' trunk hidden states (after the final norm), every position
of a ~70-token text and chained second steps: relative error <= 1e-4.
"""
import ctypes

import numpy as np
import pytest

import kzutil

from safetensors import safe_open

LIB = kzutil.REPO / kzutil.BUILD / "libkazeia_dev.so"
BOUND = 1e-4


def gguf_tensors(path):
    import gguf
    rd = gguf.GGUFReader(str(path))
    kv = {}
    for k, f in rd.fields.items():
        if f.types and f.types[0] != gguf.GGUFValueType.ARRAY and f.types[0] != gguf.GGUFValueType.STRING:
            kv[k] = f.parts[f.data[0]].tolist()[0]
    ts = {t.name: np.array(t.data, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])
          for t in rd.tensors if t.tensor_type == gguf.GGMLQuantizationType.F32}
    return kv, ts


def hf_weights(d):
    out = {}
    with safe_open(str(d / "model.safetensors"), framework="np") as f:
        for k in f.keys():
            out[k] = f.get_tensor(k).astype(np.float32)
    return out


MTP_NAMES = {  # GGUF name -> (HF name, +1 for Qwen3.5's (1 + w) norms)
    "blk.8.nextn.eh_proj.weight": ("mtp.fc.weight", False),
    "blk.8.nextn.enorm.weight": ("mtp.pre_fc_norm_embedding.weight", True),
    "blk.8.nextn.hnorm.weight": ("mtp.pre_fc_norm_hidden.weight", True),
    "blk.8.nextn.shared_head_norm.weight": ("mtp.norm.weight", True),
    "blk.8.attn_norm.weight": ("mtp.layers.0.input_layernorm.weight", True),
    "blk.8.post_attention_norm.weight": ("mtp.layers.0.post_attention_layernorm.weight", True),
    "blk.8.attn_q.weight": ("mtp.layers.0.self_attn.q_proj.weight", False),
    "blk.8.attn_k.weight": ("mtp.layers.0.self_attn.k_proj.weight", False),
    "blk.8.attn_v.weight": ("mtp.layers.0.self_attn.v_proj.weight", False),
    "blk.8.attn_output.weight": ("mtp.layers.0.self_attn.o_proj.weight", False),
    "blk.8.attn_q_norm.weight": ("mtp.layers.0.self_attn.q_norm.weight", True),
    "blk.8.attn_k_norm.weight": ("mtp.layers.0.self_attn.k_norm.weight", True),
    "blk.8.ffn_gate.weight": ("mtp.layers.0.mlp.gate_proj.weight", False),
    "blk.8.ffn_up.weight": ("mtp.layers.0.mlp.up_proj.weight", False),
    "blk.8.ffn_down.weight": ("mtp.layers.0.mlp.down_proj.weight", False),
}


def test_convert_mtp_block():
    src = kzutil.ensure_hf("qwen35")
    kv, ts = gguf_tensors(kzutil.ensure_gguf("qwen35", "f32"))
    assert kv["qwen35.block_count"] == 9 and kv["qwen35.nextn_predict_layers"] == 1
    hf = hf_weights(src)
    assert sum(k.startswith("mtp.") for k in hf) == len(MTP_NAMES)
    for g, (h, plus1) in MTP_NAMES.items():
        want = hf[h] + np.float32(1.0) if plus1 else hf[h]
        np.testing.assert_array_equal(ts[g], want, err_msg=g)


def test_convert_no_mtp_and_vlm(tmp_path):
    import convert_hf
    src = kzutil.ensure_hf("qwen35")
    out = tmp_path / "nomtp.gguf"
    convert_hf.convert(str(src), str(out), "f32", verbose=False, keep_mtp=False)
    kv, ts = gguf_tensors(out)
    assert kv["qwen35.block_count"] == 8 and "qwen35.nextn_predict_layers" not in kv
    assert not any(n.startswith("blk.8.") for n in ts)
    # the VLM layout (mtp.* beside model.language_model.*, two shards) gives the same block
    out2 = tmp_path / "vlm.gguf"
    convert_hf.convert(str(kzutil.ensure_hf_vlm()), str(out2), "f32", verbose=False)
    kv2, ts2 = gguf_tensors(out2)
    _, ts1 = gguf_tensors(kzutil.ensure_gguf("qwen35", "f32"))
    assert kv2["qwen35.nextn_predict_layers"] == 1
    for g in MTP_NAMES:
        np.testing.assert_array_equal(ts2[g], ts1[g], err_msg=g)


def test_convert_mtp_rejects_incomplete(tmp_path):
    """A checkpoint whose MTP layer lacks a tensor is refused with its name."""
    import shutil
    from safetensors.numpy import save_file
    import convert_hf
    src = kzutil.ensure_hf("qwen35")
    d = tmp_path / "bad"
    shutil.copytree(src, d)
    w = hf_weights(src)
    del w["mtp.layers.0.self_attn.k_norm.weight"]
    save_file(w, str(d / "model.safetensors"))
    with pytest.raises(convert_hf.ConvertError, match="k_norm"):
        convert_hf.convert(str(d), str(tmp_path / "x.gguf"), "f32", verbose=False)


def test_llamacpp_loads_mtp_gguf():
    """llama.cpp reads the file with its MTP block (its trunk logits unchanged by the block)."""
    toks = kzutil.tokens_short()[:12]
    ours = kzutil.kz_logits(kzutil.ensure_gguf("qwen35", "f32"), toks, prefill=len(toks))
    lc = kzutil.lc_logits(kzutil.ensure_gguf("qwen35", "f32"), toks, prefill=len(toks))
    assert np.max(kzutil.rel_err(ours, lc)) < 1e-4


# ---------------------------------------------------------------------------------------------
# the draft head vs torch

def torch_mtp(W, cfg, h, tok_next, pos, extra=None):
    """MTP block over rows r: pairs (h[r], tok_next[r]) at rope positions pos[r], causal over rows.
    extra: (h_row, token, position) appended as a last row (a chained step). Returns
    (logits [R, V], hidden after mtp.norm [R, d]) in float64."""
    import torch
    t = lambda n: torch.tensor(W[n], dtype=torch.float64)
    eps = cfg["rms_norm_eps"]

    def rms(x, w):  # Qwen3.5 RMSNorm: x / rms(x) * (1 + w)
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * (1.0 + w)

    emb = t("model.embed_tokens.weight")
    h = torch.tensor(h, dtype=torch.float64)
    toks = list(tok_next)
    pos = list(pos)
    if extra is not None:
        h = torch.cat([h, torch.tensor(extra[0], dtype=torch.float64)[None]], 0)
        toks.append(extra[1])
        pos.append(extra[2])
    e = emb[torch.tensor(toks)]
    u = torch.cat([rms(e, t("mtp.pre_fc_norm_embedding.weight")), rms(h, t("mtp.pre_fc_norm_hidden.weight"))], -1)
    x = u @ t("mtp.fc.weight").T
    L = "mtp.layers.0."
    H, Hkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    R = x.shape[0]
    hn = rms(x, t(L + "input_layernorm.weight"))
    qg = (hn @ t(L + "self_attn.q_proj.weight").T).view(R, H, 2 * hd)
    q, gate = qg[..., :hd], qg[..., hd:]
    k = (hn @ t(L + "self_attn.k_proj.weight").T).view(R, Hkv, hd)
    v = (hn @ t(L + "self_attn.v_proj.weight").T).view(R, Hkv, hd)
    q = rms(q, t(L + "self_attn.q_norm.weight"))
    k = rms(k, t(L + "self_attn.k_norm.weight"))
    rp = cfg.get("rope_parameters") or {}
    rd = int(hd * rp.get("partial_rotary_factor", 0.25))
    theta = rp.get("rope_theta", 1e7)
    inv = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
    ang = torch.tensor(pos, dtype=torch.float64)[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None], torch.cat([ang.sin(), ang.sin()], -1)[:, None]

    def rope(a):  # NEOX (rotate_half) on the first rd dims
        r, p = a[..., :rd], a[..., rd:]
        rot = torch.cat([-r[..., rd // 2:], r[..., :rd // 2]], -1)
        return torch.cat([r * cos + rot * sin, p], -1)

    q, k = rope(q), rope(k)
    rep = H // Hkv
    k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    s = torch.einsum("qhd,khd->hqk", q, k) / hd ** 0.5
    s = s.masked_fill(torch.triu(torch.ones(R, R, dtype=torch.bool), 1)[None], float("-inf"))
    o = torch.einsum("hqk,khd->qhd", s.softmax(-1), v) * torch.sigmoid(gate)
    x = x + o.reshape(R, H * hd) @ t(L + "self_attn.o_proj.weight").T
    hn = rms(x, t(L + "post_attention_layernorm.weight"))
    f = torch.nn.functional.silu(hn @ t(L + "mlp.gate_proj.weight").T) * (hn @ t(L + "mlp.up_proj.weight").T)
    x = x + f @ t(L + "mlp.down_proj.weight").T
    out = rms(x, t("mtp.norm.weight"))
    head = t("lm_head.weight") if "lm_head.weight" in W else emb
    return (out @ head.T).numpy(), out.numpy()


def engine():
    if not LIB.is_file():
        kzutil.run(["make", "-s", f"BUILD={kzutil.BUILD}", "dev"])
    L = ctypes.CDLL(str(LIB))
    P, I, F = ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float)
    L.kz_model_load.restype = P
    L.kz_model_load.argtypes = [ctypes.c_char_p, P, ctypes.c_char_p, ctypes.c_size_t]
    L.kz_seq_new.restype = P
    L.kz_seq_new.argtypes = [P, I, I, I, I, ctypes.c_char_p, ctypes.c_size_t]
    L.kz_forward.restype = I
    L.kz_forward.argtypes = [P, P, ctypes.POINTER(ctypes.c_int32), I, F, I, ctypes.c_char_p, ctypes.c_size_t]
    L.kz_seq_mtp_hidden.restype = F
    L.kz_seq_mtp_hidden.argtypes = [P]
    L.kz_seq_mtp_draft.restype = ctypes.c_int32
    L.kz_seq_mtp_draft.argtypes = [P, F, ctypes.c_int32, I, F, F]
    L.kz_seq_free.argtypes = [P]
    L.kz_model_free.argtypes = [P]
    return L


def fptr(a):
    return a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def test_mtp_draft_vs_torch():
    import json
    import torch
    from transformers import AutoModelForCausalLM
    src = kzutil.ensure_hf("qwen35")
    cfg = json.loads((src / "config.json").read_text())
    W = hf_weights(src)
    toks = kzutil.tokens_short()
    T = len(toks)
    m = AutoModelForCausalLM.from_pretrained(str(src), dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        hid = m.model(torch.tensor([toks])).last_hidden_state[0].double().numpy()  # after the final norm
    ref, ref_h = torch_mtp(W, cfg, hid[:T - 1], toks[1:], [s + 1 for s in range(T - 1)])

    L = engine()
    err = ctypes.create_string_buffer(512)
    mdl = L.kz_model_load(str(kzutil.ensure_gguf("qwen35", "f32")).encode(), None, err, 512)
    assert mdl, err.value
    seq = L.kz_seq_new(mdl, 256, 16, 2, 0, err, 512)  # KV f32
    assert seq, err.value
    V, E = ref.shape[1], hid.shape[1]
    arr = (ctypes.c_int32 * T)(*toks)
    lg = np.zeros(V, np.float32)
    hout = np.zeros(E, np.float32)
    P0 = 20  # prefill 20 tokens (two chunks), then one step at a time
    assert L.kz_forward(mdl, seq, arr, P0, fptr(lg), 0, err, 512) == 0, err.value
    errs, chain_errs = [], []
    for s in range(P0 - 1, T - 1):
        hp = L.kz_seq_mtp_hidden(seq)
        h_s = np.ctypeslib.as_array(hp, shape=(E,)).copy()
        assert np.max(np.abs(h_s - hid[s])) / np.max(np.abs(hid[s])) < 1e-4  # the trunk hidden, after the norm
        L.kz_seq_mtp_draft(seq, hp, toks[s + 1], s, fptr(lg), fptr(hout))
        errs.append(np.linalg.norm(lg - ref[s]) / np.linalg.norm(ref[s]))
        assert np.argmax(lg) == np.argmax(ref[s])
        if s + 2 < T and s % 5 == 0:  # a chained step: the draft's hidden with the next token
            h1 = hout.copy()
            L.kz_seq_mtp_draft(seq, fptr(h1), toks[s + 2], s + 1, fptr(lg), fptr(hout))
            want, _ = torch_mtp(W, cfg, hid[:s + 1], toks[1:s + 2], [r + 1 for r in range(s + 1)],
                                extra=(ref_h[s], toks[s + 2], s + 2))
            chain_errs.append(np.linalg.norm(lg - want[-1]) / np.linalg.norm(want[-1]))
        assert L.kz_forward(mdl, seq, (ctypes.c_int32 * 1)(toks[s + 1]), 1, fptr(lg), 0, err, 512) == 0, err.value
    L.kz_seq_free(seq)
    L.kz_model_free(mdl)
    print(f"mtp draft vs torch: {len(errs)} positions, max rel err {max(errs):.2e}; "
          f"{len(chain_errs)} chained steps, max {max(chain_errs):.2e}")
    assert max(errs) <= BOUND and max(chain_errs) <= BOUND
    # the check can fail: a wrong hidden (before the final norm) is far off
    bad, _ = torch_mtp(W, cfg, hid[:T - 1] * 2.0 + 0.1, toks[1:], [s + 1 for s in range(T - 1)])
    assert np.linalg.norm(bad[T - 2] - ref[T - 2]) / np.linalg.norm(ref[T - 2]) > 100 * BOUND
