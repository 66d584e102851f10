#!/usr/bin/env python3
"""Build tiny random-weight Hugging Face checkpoints for converter/engine tests.

    python3 tools/make_tiny_hf.py OUT_DIR [--which qwen35,qwen3,qwen35-vlm] [--tokenizer DIR]

Writes OUT_DIR/qwen35-tiny (Qwen3_5ForCausalLM), OUT_DIR/qwen3-tiny (Qwen3ForCausalLM) and,
with "qwen35-vlm", OUT_DIR/qwen35-tiny-vlm: the same qwen35 weights laid out like a real
Qwen3_5ForConditionalGeneration checkpoint (nested text_config, model.language_model.* names,
a vision tensor, two safetensors shards + index) so the converter's layout handling is tested.

Every weight is drawn from one seeded torch.Generator in sorted-name order, so the output is
bit-identical across runs. Sizes are chosen so each code path is exercised: >= 8 layers with
full_attention_interval 4 (GDN and attention interleave), H_v != H_k (V-head reorder), partial
rotary, non-zero (1 + w) norms and random A_log / dt_bias. Magnitudes are set so activations
and logits are not flat: greedy-argmax comparisons need real margins.
"""
import argparse
import json
import math
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TOKENIZER = REPO.parent / "shared" / "data" / "qwen3-tokenizer"
VOCAB = 151936  # Qwen3 vocab as padded in its checkpoints (151669 real tokens)
SEED = {"qwen35": 35, "qwen3": 3}
# Init scales (see randomize()), chosen by measuring (tests/py report): small embeddings and
# small output projections keep the residual stream dominated by the blocks, so tied embeddings
# do not make "argmax = input token" trivially true; input gains < 1 and correlated q/k keep the
# network from amplifying rounding/quantization noise many-fold (random q.k ~ 0 makes the GDN
# read-out o = S^T q a near-cancelling sum); slow GDN decays (A in [0.02, 0.5]) keep o away
# from 0 for the same reason; the large final-norm multiplier restores O(1) logit margins.
EMB_STD = 0.1
GAIN = 0.8          # std * sqrt(fan_in) of input-side projections
GAIN_OUT = 0.25     # ... of o_proj / out_proj / down_proj
OUT_PROJ = ("o_proj.weight", "out_proj.weight", "down_proj.weight")
OUT_NORM = 4.0      # final RMSNorm multiplier: logit std ~ OUT_NORM * EMB_STD * sqrt(d)
GDN_HD = 32         # linear_key_head_dim = linear_value_head_dim (llama.cpp needs them equal)
QK_CORR = 0.8       # correlation of the k rows/conv taps with the q ones
A_MIN, A_MAX = 0.02, 0.5


def qwen35_config():
    from transformers import Qwen3_5TextConfig
    n_layer = 8
    return Qwen3_5TextConfig(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=n_layer,
        num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        linear_conv_kernel_dim=4, linear_key_head_dim=GDN_HD, linear_value_head_dim=GDN_HD,
        linear_num_key_heads=2, linear_num_value_heads=4,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n_layer)],
        max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.08,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [11, 11, 10], "mrope_interleaved": True},
        tie_word_embeddings=True, eos_token_id=151645, pad_token_id=151643,
        architectures=["Qwen3_5ForCausalLM"],
    )


def qwen3_config():
    from transformers import Qwen3Config
    return Qwen3Config(
        vocab_size=VOCAB, hidden_size=128, intermediate_size=256, num_hidden_layers=8,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        max_position_embeddings=4096, rms_norm_eps=1e-6, initializer_range=0.08,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645,
        architectures=["Qwen3ForCausalLM"],
    )


def randomize(model, arch, seed):
    """Overwrite every parameter from a seeded generator (name-sorted, so deterministic)."""
    import torch
    g = torch.Generator().manual_seed(seed)

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=g, dtype=torch.float32) * std + mean

    params = dict(model.named_parameters())
    for name in sorted(params):
        p = params[name]
        shape = tuple(p.shape)
        if name.endswith("embed_tokens.weight"):
            val = normal(shape, EMB_STD)
        elif name.endswith("linear_attn.A_log"):
            # decays exp(-A * softplus(.)) spread from slow to fast forgetting
            val = torch.log(torch.rand(shape, generator=g) * (A_MAX - A_MIN) + A_MIN)
        elif name.endswith("linear_attn.dt_bias"):
            val = normal(shape, 0.5, 1.0)
        elif name.endswith("linear_attn.conv1d.weight"):
            val = normal(shape, 0.4)
        elif name.endswith("linear_attn.norm.weight"):
            val = normal(shape, 0.2, 1.0)  # plain-w gated norm
        elif name == "model.norm.weight":
            # final norm multiplier ~OUT_NORM: logit std ~ OUT_NORM * EMB_STD * sqrt(d)
            val = normal(shape, 0.2, OUT_NORM - 1.0 if arch == "qwen35" else OUT_NORM)
        elif name.endswith("norm.weight"):
            # qwen35 RMSNorm is (1 + w) with w initialised to 0 by HF; qwen3 is plain w
            val = normal(shape, 0.2, 0.0 if arch == "qwen35" else 1.0)
        elif p.dim() == 2:
            val = normal(shape, (GAIN_OUT if name.endswith(OUT_PROJ) else GAIN) / math.sqrt(shape[1]))
        else:
            raise RuntimeError(f"make_tiny_hf: no init rule for parameter {name} {shape}")
        if QK_CORR > 0 and name.endswith(("linear_attn.in_proj_qkv.weight", "linear_attn.conv1d.weight")):
            # correlate the k half with the q half (as in trained models, where q.k of related
            # tokens is large): with independent random q/k, o = S^T q comes from near-cancelling
            # sums and the layer amplifies any rounding/quantization noise several-fold
            kd = model.config.linear_num_key_heads * model.config.linear_key_head_dim
            val[kd:2 * kd] = QK_CORR * val[:kd] + math.sqrt(1 - QK_CORR ** 2) * val[kd:2 * kd]
        with torch.no_grad():
            p.copy_(val)


def copy_tokenizer(tok_dir, out_dir):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        src = Path(tok_dir) / f
        if not src.is_file():
            raise SystemExit(f"make_tiny_hf: tokenizer file missing: {src}")
        shutil.copyfile(src, Path(out_dir) / f)


def mtp_shapes(cfg):
    """The MTP block as real Qwen3.5 checkpoints name and shape it (mtp.*: one full-attention
    decoder layer with the output gate in q_proj, fc over [embedding; hidden], three norms)."""
    d, hd = cfg.hidden_size, cfg.head_dim
    L = "mtp.layers.0."
    return {
        "mtp.fc.weight": (d, 2 * d),
        "mtp.pre_fc_norm_embedding.weight": (d,),
        "mtp.pre_fc_norm_hidden.weight": (d,),
        "mtp.norm.weight": (d,),
        L + "input_layernorm.weight": (d,),
        L + "post_attention_layernorm.weight": (d,),
        L + "self_attn.q_proj.weight": (2 * cfg.num_attention_heads * hd, d),
        L + "self_attn.k_proj.weight": (cfg.num_key_value_heads * hd, d),
        L + "self_attn.v_proj.weight": (cfg.num_key_value_heads * hd, d),
        L + "self_attn.o_proj.weight": (d, cfg.num_attention_heads * hd),
        L + "self_attn.q_norm.weight": (hd,),
        L + "self_attn.k_norm.weight": (hd,),
        L + "mlp.gate_proj.weight": (cfg.intermediate_size, d),
        L + "mlp.up_proj.weight": (cfg.intermediate_size, d),
        L + "mlp.down_proj.weight": (d, cfg.intermediate_size),
    }


def add_mtp_tensors(out_dir, cfg, seed):
    """Real Qwen3.5 checkpoints carry an MTP block under mtp.*, which transformers ignores: write
    a random one into the safetensors (same init rules as the trunk: norms are (1 + w), output
    projections small) so the converter's MTP export and the engine's draft head are tested."""
    import torch
    from safetensors.torch import load_file, save_file
    path = Path(out_dir) / "model.safetensors"
    sd = load_file(str(path))
    g = torch.Generator().manual_seed(seed + 1000)
    for k, shp in sorted(mtp_shapes(cfg).items()):
        if len(shp) == 1:
            # (1 + w) norms; the final one is the head's input, scaled like model.norm
            val = torch.randn(shp, generator=g) * 0.2 + (OUT_NORM - 1.0 if k == "mtp.norm.weight" else 0.0)
        else:
            val = torch.randn(shp, generator=g) * ((GAIN_OUT if k.endswith(OUT_PROJ) else GAIN) / math.sqrt(shp[1]))
        sd[k] = val.contiguous()
    cfg_path = Path(out_dir) / "config.json"
    c = json.loads(cfg_path.read_text())
    c["mtp_num_hidden_layers"] = 1
    cfg_path.write_text(json.dumps(c, indent=2))
    save_file(sd, str(path), metadata={"format": "pt"})


def build(arch, out_dir, tok_dir):
    import torch
    torch.manual_seed(SEED[arch])
    if arch == "qwen35":
        from transformers import Qwen3_5ForCausalLM
        cfg = qwen35_config()
        model = Qwen3_5ForCausalLM(cfg)
    else:
        from transformers import Qwen3ForCausalLM
        cfg = qwen3_config()
        model = Qwen3ForCausalLM(cfg)
    model = model.float().eval()
    randomize(model, arch, SEED[arch])
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir), safe_serialization=True)
    if arch == "qwen35":
        add_mtp_tensors(out_dir, cfg, SEED[arch])
    copy_tokenizer(tok_dir, out_dir)
    return out_dir


def build_vlm_layout(src_dir, out_dir):
    """Re-lay a qwen35-tiny checkpoint as Qwen3_5ForConditionalGeneration (text weights identical)."""
    import torch
    from safetensors.torch import load_file, save_file
    src_dir, out_dir = Path(src_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    text_cfg = json.loads((src_dir / "config.json").read_text())
    top = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "tie_word_embeddings": text_cfg.get("tie_word_embeddings", True),
        "text_config": {k: v for k, v in text_cfg.items() if k not in ("architectures",)},
        "vision_config": {"depth": 1, "hidden_size": 16, "out_hidden_size": 128},
        "image_token_id": 151655,
    }
    (out_dir / "config.json").write_text(json.dumps(top, indent=2))
    sd = load_file(str(src_dir / "model.safetensors"))
    renamed = {}
    for k, v in sd.items():
        if k.startswith("model."):
            k = "model.language_model." + k[len("model."):]
        renamed[k] = v
    renamed["model.visual.patch_embed.proj.weight"] = torch.ones(16, 3, 2, 2, 2)
    names = sorted(renamed)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: renamed[k].contiguous() for k in part}, str(out_dir / fn), metadata={"format": "pt"})
        for k in part:
            weight_map[k] = fn
    (out_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(src_dir / f, out_dir / f)
    return out_dir


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--which", default="qwen35,qwen3", help="comma list of qwen35, qwen3, qwen35-vlm")
    ap.add_argument("--tokenizer", default=str(DEFAULT_TOKENIZER), help="dir with tokenizer.json")
    a = ap.parse_args(argv)
    which = [w.strip() for w in a.which.split(",") if w.strip()]
    for w in which:
        if w not in ("qwen35", "qwen3", "qwen35-vlm"):
            ap.error(f"unknown model {w!r}")
    out = Path(a.out_dir)
    if "qwen35" in which or ("qwen35-vlm" in which and not (out / "qwen35-tiny" / "config.json").is_file()):
        print("built", build("qwen35", out / "qwen35-tiny", a.tokenizer))
    if "qwen3" in which:
        print("built", build("qwen3", out / "qwen3-tiny", a.tokenizer))
    if "qwen35-vlm" in which:
        print("built", build_vlm_layout(out / "qwen35-tiny", out / "qwen35-tiny-vlm"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
