"""A qwen35 GGUF written by tools/convert_hf.py back to a transformers checkpoint (F32
safetensors + config.json), so transformers can run the very weights a GGUF holds: dequantised
values are exact in F32, and each tensor's transform (V-head reorder, 1 + w norms, -exp(A_log),
squeezed conv) is undone from the converter's own plan, inverted here. If the converter wrote a
tensor the way llama.cpp does not read it, the engine (which reads llama.cpp's layout) and
transformers on this checkpoint disagree: that is what the tests using it check.

    python3 tests/py/gguf2hf.py MODEL.gguf OUT_DIR
"""
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import convert_hf  # noqa: E402


def _kv(r, key):
    f = r.fields.get(key)
    if f is None:
        return None
    v = f.contents()
    return v


def hf_config(r):
    a = "qwen35"
    assert _kv(r, "general.architecture") == a, "only qwen35 GGUFs"
    n_mtp = int(_kv(r, f"{a}.nextn_predict_layers") or 0)
    n_layer = int(_kv(r, f"{a}.block_count")) - n_mtp
    fai = int(_kv(r, f"{a}.full_attention_interval"))
    names = {t.name for t in r.tensors}
    emb = next(t for t in r.tensors if t.name == "token_embd.weight")
    hd = int(_kv(r, f"{a}.attention.key_length"))
    n_rot = int(_kv(r, f"{a}.rope.dimension_count"))
    sec = [int(x) for x in _kv(r, f"{a}.rope.dimension_sections")][:3]
    n_v = int(_kv(r, f"{a}.ssm.time_step_rank"))
    return {
        "architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
        "vocab_size": int(emb.shape[1]), "hidden_size": int(_kv(r, f"{a}.embedding_length")),
        "intermediate_size": int(_kv(r, f"{a}.feed_forward_length")), "num_hidden_layers": n_layer,
        "num_attention_heads": int(_kv(r, f"{a}.attention.head_count")),
        "num_key_value_heads": int(_kv(r, f"{a}.attention.head_count_kv")), "head_dim": hd,
        "hidden_act": "silu", "max_position_embeddings": int(_kv(r, f"{a}.context_length")),
        "rms_norm_eps": float(_kv(r, f"{a}.attention.layer_norm_rms_epsilon")),
        "tie_word_embeddings": "output.weight" not in names,
        "rope_parameters": {"rope_type": "default", "rope_theta": float(_kv(r, f"{a}.rope.freq_base")),
                            "partial_rotary_factor": n_rot / hd, "mrope_section": sec, "mrope_interleaved": True},
        "attention_bias": False, "attention_dropout": 0.0,
        "linear_conv_kernel_dim": int(_kv(r, f"{a}.ssm.conv_kernel")),
        "linear_key_head_dim": int(_kv(r, f"{a}.ssm.state_size")),
        "linear_value_head_dim": int(_kv(r, f"{a}.ssm.inner_size")) // n_v,
        "linear_num_key_heads": int(_kv(r, f"{a}.ssm.group_count")), "linear_num_value_heads": n_v,
        "layer_types": ["full_attention" if (i + 1) % fai == 0 else "linear_attention" for i in range(n_layer)],
        "mtp_num_hidden_layers": n_mtp, "eos_token_id": 0, "dtype": "float32",
    }


def _hf_names(r, cfg):
    """GGUF tensor name -> HF name, inverting the converter's name maps"""
    n_layer = cfg["num_hidden_layers"]
    inv = {v: k for k, v in {**convert_hf.LAYER_MAP, **convert_hf.QWEN35_LAYER_MAP}.items()}
    inv_mtp = {v: k for k, v in convert_hf.MTP_MAP.items()}
    out = {}
    for t in r.tensors:
        g = t.name
        if g == "token_embd.weight":
            out[g] = "model.embed_tokens.weight"
        elif g == "output_norm.weight":
            out[g] = "model.norm.weight"
        elif g == "output.weight":
            out[g] = "lm_head.weight"
        else:
            _, b, sub = g.split(".", 2)
            b = int(b)
            if b < n_layer:
                out[g] = f"model.layers.{b}.{inv[sub]}"
            elif sub in inv_mtp:
                out[g] = f"mtp.{inv_mtp[sub]}"
            else:
                out[g] = f"mtp.layers.{b - n_layer}.{inv[sub]}"
    return out


class _Shape:
    """what build_plan reads of a checkpoint tensor"""
    def __init__(self, shape):
        self.shape, self.dtype = tuple(shape), "F32"


def convert(gguf_path, out_dir):
    import gguf
    from safetensors.numpy import save_file
    r = gguf.GGUFReader(str(gguf_path))
    cfg = hf_config(r)
    names = _hf_names(r, cfg)
    data = {}
    for t in r.tensors:
        shape = [int(x) for x in reversed(t.shape)]  # GGUF ne is innermost first
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        data[t.name] = x
    # the shapes the checkpoint had: conv [C, 1, K]; everything else as in the GGUF
    hf_shapes = {}
    for g, h in names.items():
        s = list(data[g].shape)
        if g.endswith("ssm_conv1d.weight"):
            s = [s[0], 1, s[1]]
        hf_shapes[h] = s
    plan, _, _ = convert_hf.build_plan({h: _Shape(s) for h, s in hf_shapes.items()}, "qwen35", cfg, "f32")
    out = {}
    for it in plan:
        x = data[it.gname].astype(np.float64)
        if it.neg_exp:
            x = np.log(-x)
        if it.add_one:
            x = x - 1.0
        x = x.astype(np.float32)
        if it.col_perm is not None:
            y = np.empty_like(x)
            y[:, it.col_perm] = x
            x = y
        if it.row_perm is not None:
            y = np.empty_like(x)
            y[it.row_perm] = x
            x = y
        h = names[it.gname]
        out[h] = np.ascontiguousarray(x.reshape(hf_shapes[h]))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(out, str(out_dir / "model.safetensors"))
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return out_dir


if __name__ == "__main__":
    convert(sys.argv[1], sys.argv[2])
    print(f"wrote {sys.argv[2]}")
