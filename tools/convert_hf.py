#!/usr/bin/env python3
"""Hugging Face checkpoint -> GGUF converter for Kazeia-Engine.

    python3 tools/convert_hf.py HF_MODEL_DIR OUT.gguf [--type f32|f16|bf16|q8_0|q4_0]
                                [--tensor-type REGEX=TYPE ...] [--no-mtp]

Supported: Qwen3_5ForCausalLM / Qwen3_5ForConditionalGeneration (text decoder only, GGUF arch
"qwen35") and Qwen3ForCausalLM ("qwen3"). The output uses the metadata keys, tensor names and
weight transforms of llama.cpp's converter (docs/qwen35.md: GGUF metadata keys, tensors, norm weights, Qwen3 dense),
so the files also load in llama.cpp. The vision tower is skipped. Qwen3.5's MTP
(multi-token-prediction) block is kept as llama.cpp's converter writes it: `mtp.layers.J.*` ->
`blk.{n_layer+J}.*`, `mtp.fc` -> `nextn.eh_proj`, `mtp.pre_fc_norm_embedding` / `_hidden` ->
`nextn.enorm` / `nextn.hnorm`, `mtp.norm` -> `nextn.shared_head_norm` (norms +1 like every
Qwen3.5 RMSNorm), `block_count` counting it and `nextn_predict_layers` set; `--no-mtp` drops it.
Sharded checkpoints (model.safetensors.index.json) and the VLM layout (model.language_model.*)
are read as they are; tokenizer.chat_template is embedded from tokenizer_config.json.

Memory: tensors are read through np.memmap and converted in row chunks straight into the output
buffer, so peak RAM is about one output tensor plus a chunk, never the whole model.
"""
import argparse
import json
import os
import re
import struct
import sys
from pathlib import Path

import numpy as np

TOOLS_DIR = Path(__file__).resolve().parent
if str(TOOLS_DIR) not in sys.path:
    sys.path.insert(0, str(TOOLS_DIR))

import gguf  # noqa: E402
from gguf import GGMLQuantizationType as QT  # noqa: E402

OUT_TYPES = {
    "f32": (QT.F32, gguf.LlamaFileType.ALL_F32),
    "f16": (QT.F16, gguf.LlamaFileType.MOSTLY_F16),
    "bf16": (QT.BF16, gguf.LlamaFileType.MOSTLY_BF16),
    "q8_0": (QT.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    "q4_0": (QT.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
}

ARCHS = {
    "Qwen3_5ForCausalLM": "qwen35",
    "Qwen3_5ForConditionalGeneration": "qwen35",
    "Qwen3ForCausalLM": "qwen3",
}

CHUNK_ELEMS = 1 << 22  # ~16 MiB of f32 per conversion chunk


class ConvertError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# safetensors reading (header parse + memmap: streams, and handles BF16 which numpy lacks)

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "F64": np.float64}


class STensor:
    """One tensor inside a safetensors file, mapped lazily."""

    def __init__(self, path, name, dtype, shape, begin, end):
        self.path, self.name, self.dtype, self.shape = path, name, dtype, tuple(shape)
        self.begin, self.end = begin, end

    def array(self):
        """Raw memmap in the stored dtype (BF16 as uint16)."""
        n = int(np.prod(self.shape)) if self.shape else 1
        itemsize = np.dtype(ST_DTYPES[self.dtype]).itemsize
        if self.end - self.begin != n * itemsize:
            raise ConvertError(f"{self.path}: tensor {self.name} byte size {self.end - self.begin} does not match "
                               f"shape {list(self.shape)} x {self.dtype}")
        if n == 0:
            return np.zeros(self.shape, dtype=ST_DTYPES[self.dtype])
        return np.memmap(self.path, dtype=ST_DTYPES[self.dtype], mode="r", offset=self.begin, shape=self.shape)


def to_f32(a, st_dtype):
    if st_dtype == "BF16":
        return (np.asarray(a, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.asarray(a, dtype=np.float32)


def read_safetensors_header(path):
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ConvertError(f"{path}: too short to be a safetensors file")
        (hlen,) = struct.unpack("<Q", raw)
        if hlen > size - 8 or hlen > 512 * 1024 * 1024:
            raise ConvertError(f"{path}: bad safetensors header length {hlen}")
        try:
            header = json.loads(f.read(hlen))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ConvertError(f"{path}: safetensors header is not valid JSON ({e})")
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info.get("dtype")
        if dt not in ST_DTYPES:
            raise ConvertError(f"{path}: tensor {name} has dtype {dt}; only F32/F16/BF16/F64 are supported")
        b, e = info["data_offsets"]
        if not (0 <= b <= e <= size - base):
            raise ConvertError(f"{path}: tensor {name} data offsets {b}..{e} outside the file")
        out[name] = STensor(str(path), name, dt, info["shape"], base + b, base + e)
    return out


def index_checkpoint(model_dir):
    model_dir = Path(model_dir)
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        wm = json.loads(index.read_text()).get("weight_map")
        if not isinstance(wm, dict):
            raise ConvertError(f"{index}: no weight_map")
        files = sorted(set(wm.values()))
    else:
        files = sorted(p.name for p in model_dir.glob("*.safetensors"))
    if not files:
        raise ConvertError(f"{model_dir}: no *.safetensors files (pytorch .bin checkpoints are not supported)")
    tensors = {}
    for fn in files:
        p = model_dir / fn
        if not p.is_file():
            raise ConvertError(f"{p}: listed in the index but missing")
        for name, t in read_safetensors_header(p).items():
            if name in tensors:
                raise ConvertError(f"tensor {name} appears in two shards ({tensors[name].path}, {p})")
            tensors[name] = t
    return tensors


# ---------------------------------------------------------------------------------------------
# config

def load_hparams(model_dir):
    p = Path(model_dir) / "config.json"
    if not p.is_file():
        raise ConvertError(f"{p}: not found")
    cfg = json.loads(p.read_text())
    archs = cfg.get("architectures") or []
    hf_arch = next((a for a in archs if a in ARCHS), None)
    if hf_arch is None:
        raise ConvertError(f"{p}: architectures {archs} not supported (want one of {sorted(ARCHS)})")
    hp = dict(cfg)
    if isinstance(cfg.get("text_config"), dict):
        hp.update(cfg["text_config"])  # text decoder parameters win over the wrapper's
    rp = hp.get("rope_parameters") or hp.get("rope_scaling") or {}
    rp = dict(rp)
    if "rope_theta" not in rp and "rope_theta" in hp:
        rp["rope_theta"] = hp["rope_theta"]
    if "partial_rotary_factor" not in rp and "partial_rotary_factor" in hp:
        rp["partial_rotary_factor"] = hp["partial_rotary_factor"]
    hp["_rope"] = rp
    return hf_arch, ARCHS[hf_arch], hp


def need(hp, key):
    if key not in hp or hp[key] is None:
        raise ConvertError(f"config.json: missing required key {key!r}")
    return hp[key]


def full_attention_interval(hp):
    """Derive the interval from layer_types (HF drops full_attention_interval from the saved config)."""
    n = need(hp, "num_hidden_layers")
    lt = hp.get("layer_types")
    if not lt:
        return int(hp.get("full_attention_interval", 4))
    if len(lt) != n:
        raise ConvertError(f"config.json: layer_types has {len(lt)} entries, num_hidden_layers is {n}")
    for iv in range(1, n + 1):
        if all((t == "full_attention") == ((i + 1) % iv == 0) for i, t in enumerate(lt)):
            return iv
    # n+1 would mean "all linear"; anything else cannot be written with the interval key
    if all(t == "linear_attention" for t in lt):
        return n + 1
    raise ConvertError("config.json: layer_types is not a regular 'every N-th layer is full attention' "
                       "pattern; it cannot be expressed with full_attention_interval")


# ---------------------------------------------------------------------------------------------
# tensor plan

class Item:
    """One output tensor: where it comes from and how to transform it."""

    def __init__(self, gname, src, qtype):
        self.gname, self.src, self.qtype = gname, src, qtype
        self.row_perm = None    # gather index over output rows (V-head reorder)
        self.col_perm = None    # gather index over columns (out_proj)
        self.add_one = False
        self.neg_exp = False
        self.squeeze_conv = False
        self.shape = None       # numpy (row-major) shape of the output tensor


LAYER_MAP = {
    "input_layernorm.weight": "attn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
}
QWEN35_LAYER_MAP = {
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "linear_attn.in_proj_qkv.weight": "attn_qkv.weight",
    "linear_attn.in_proj_z.weight": "attn_gate.weight",
    "linear_attn.in_proj_b.weight": "ssm_beta.weight",
    "linear_attn.in_proj_a.weight": "ssm_alpha.weight",
    "linear_attn.conv1d.weight": "ssm_conv1d.weight",
    "linear_attn.dt_bias": "ssm_dt.bias",
    "linear_attn.A_log": "ssm_a",
    "linear_attn.norm.weight": "ssm_norm.weight",
    "linear_attn.out_proj.weight": "ssm_out.weight",
}
QWEN3_LAYER_MAP = {"post_attention_layernorm.weight": "ffn_norm.weight"}

# always stored F32 (small, precision-sensitive; what llama.cpp files contain)
F32_SUFFIXES = ("_norm.weight", "ssm_conv1d.weight", "ssm_alpha.weight", "ssm_beta.weight")


SKIP_PREFIXES = ("model.visual.", "visual.", "model.vision_tower.", "vision_tower.")


def normalize_name(name):
    """Map checkpoint layouts onto 'model.*' / 'lm_head.*'; None = not part of the text decoder
    (vision tower, MTP head, rotary caches)."""
    if name.startswith("model.language_model."):
        name = "model." + name[len("model.language_model."):]
    elif name.startswith("language_model.model."):
        name = "model." + name[len("language_model.model."):]
    elif name.startswith("language_model.lm_head."):
        name = name[len("language_model."):]
    if name.startswith("model.mtp."):
        name = name[len("model."):]
    if name.startswith(SKIP_PREFIXES) or name.endswith(".rotary_emb.inv_freq"):
        return None
    return name


# MTP head tensors outside its decoder layer (HF name after "mtp.") -> GGUF suffix after blk.N.
MTP_MAP = {
    "fc.weight": "nextn.eh_proj.weight",
    "pre_fc_norm_embedding.weight": "nextn.enorm.weight",
    "pre_fc_norm_hidden.weight": "nextn.hnorm.weight",
    "norm.weight": "nextn.shared_head_norm.weight",
    "embed_tokens.weight": "nextn.embed_tokens.weight",
    "shared_head.head.weight": "nextn.shared_head_head.weight",
}


def count_mtp_layers(tensors, hp):
    """MTP decoder layers in the checkpoint (config's mtp_num_hidden_layers when the tensors agree)."""
    idx = set()
    for n in tensors:
        nn = normalize_name(n)
        if nn is None:
            continue
        m = re.match(r"^mtp\.layers\.(\d+)\.", nn)
        if m:
            idx.add(int(m.group(1)))
    n = max(idx) + 1 if idx else 0
    want = int(hp.get("mtp_num_hidden_layers") or 0)
    if want and n and want != n:
        raise ConvertError(f"config.json: mtp_num_hidden_layers {want} but the checkpoint has {n} mtp.layers")
    return n


def layer_is_attention(arch, hp, i):
    if arch == "qwen3":
        return True
    lt = hp.get("layer_types")
    if lt:
        return lt[i] == "full_attention"
    return (i + 1) % full_attention_interval(hp) == 0


ATTN_SUBS = ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
             "self_attn.o_proj.weight", "self_attn.q_norm.weight", "self_attn.k_norm.weight")
GDN_SUBS = ("linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_z.weight", "linear_attn.in_proj_b.weight",
            "linear_attn.in_proj_a.weight", "linear_attn.conv1d.weight", "linear_attn.dt_bias",
            "linear_attn.A_log", "linear_attn.norm.weight", "linear_attn.out_proj.weight")
COMMON_SUBS = ("input_layernorm.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight",
               "mlp.up_proj.weight", "mlp.down_proj.weight")


def check_layers(arch, hp, seen):
    """Every layer must have exactly its kind's tensors (names the first missing/extra one)."""
    n_layer = int(need(hp, "num_hidden_layers"))
    for i in range(n_layer):
        attn = layer_is_attention(arch, hp, i)
        want = set(COMMON_SUBS) | set(ATTN_SUBS if attn else GDN_SUBS)
        got = seen.get(i, set())
        missing = sorted(want - got)
        if missing:
            raise ConvertError(f"layer {i} ({'attention' if attn else 'linear-attention'}): "
                               f"missing model.layers.{i}.{missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else ""))
        wrong = sorted(x for x in got - want if x.startswith(("self_attn.", "linear_attn.")) and not x.endswith(".bias"))
        if wrong:
            raise ConvertError(f"layer {i} is {'attention' if attn else 'linear-attention'} per config but has "
                               f"model.layers.{i}.{wrong[0]}")


def v_head_perm(n_k, n_v, hd):
    """Gather index for the grouped -> tiled V-head reorder (docs/qwen35.md#v-head-order): new head r*H_k+g takes
    old head g*R+r, head blocks of hd rows kept intact."""
    r_per = n_v // n_k
    heads = np.empty(n_v, dtype=np.int64)
    for new in range(n_v):
        r, g = divmod(new, n_k)
        heads[new] = g * r_per + r
    return (heads[:, None] * hd + np.arange(hd)[None, :]).reshape(-1)


def pick_type(gname, shape, want, overrides=()):
    if len(shape) <= 1 or gname.endswith(F32_SUFFIXES):
        return QT.F32
    for rx, t in overrides:  # --tensor-type: first matching pattern wins
        if rx.search(gname):
            want = t
            break
    if want in (QT.Q8_0, QT.Q4_0) and shape[-1] % 32 != 0:
        return QT.F16  # rows must be whole 32-blocks; same fallback as llama.cpp's converter
    return want


def same_tensor(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = a.array(), b.array()
    step = max(1, CHUNK_ELEMS // max(1, int(np.prod(x.shape[1:]))))
    return all(np.array_equal(x[r:r + step], y[r:r + step]) for r in range(0, x.shape[0], step))


def build_plan(tensors, arch, hp, want, overrides=(), keep_mtp=True):
    n_layer = int(need(hp, "num_hidden_layers"))
    n_mtp = count_mtp_layers(tensors, hp) if arch == "qwen35" and keep_mtp else 0
    tied = bool(hp.get("tie_word_embeddings", False))
    if tied:
        # a checkpoint may still carry lm_head.weight; drop it only if it really is the embedding
        # (wrapper and text configs can disagree on the flag, the tensors cannot)
        lm = next((t for n, t in tensors.items() if normalize_name(n) == "lm_head.weight"), None)
        emb = next((t for n, t in tensors.items() if normalize_name(n) == "model.embed_tokens.weight"), None)
        if lm is not None and emb is not None and not same_tensor(lm, emb):
            tied = False
    lmap = dict(LAYER_MAP)
    lmap.update(QWEN35_LAYER_MAP if arch == "qwen35" else QWEN3_LAYER_MAP)

    if arch == "qwen35":
        n_k = int(need(hp, "linear_num_key_heads"))
        n_v = int(need(hp, "linear_num_value_heads"))
        dk = int(need(hp, "linear_key_head_dim"))
        dv = int(need(hp, "linear_value_head_dim"))
        if n_v % n_k != 0:
            raise ConvertError(f"config.json: linear_num_value_heads {n_v} is not a multiple of linear_num_key_heads {n_k}")
        reorder = n_v != n_k
        key_dim = n_k * dk
    items = {}
    skipped = []
    seen = {}
    layer_re = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
    for src_name in sorted(tensors):
        name = normalize_name(src_name)
        if name is None:
            skipped.append(src_name)
            continue
        t = tensors[src_name]
        if name.startswith("mtp."):
            if not n_mtp:
                skipped.append(src_name)
                continue
            rest = name[len("mtp."):]
            m = re.match(r"^layers\.(\d+)\.(.+)$", rest)
            if m:  # the MTP decoder layer: a full-attention layer numbered after the main ones
                bid, sub = n_layer + int(m.group(1)), m.group(2)
                if sub not in lmap or sub.startswith("linear_attn."):
                    raise ConvertError(f"tensor {src_name}: no GGUF name for MTP layer tensor '{sub}'")
                gname = f"blk.{bid}.{lmap[sub]}"
                seen.setdefault(bid, set()).add(sub)
            elif rest in MTP_MAP:
                sub = MTP_MAP[rest]  # its norms get +1 below, as in llama.cpp
                gname = f"blk.{n_layer}.{MTP_MAP[rest]}"
            else:
                raise ConvertError(f"tensor {src_name}: not a recognised MTP tensor")
        elif name == "model.embed_tokens.weight":
            gname = "token_embd.weight"
            sub = None
        elif name == "model.norm.weight":
            gname = "output_norm.weight"
            sub = "norm.weight"
        elif name == "lm_head.weight":
            if tied:
                skipped.append(src_name)  # tied: llama.cpp reuses token_embd, no output.weight
                continue
            gname = "output.weight"
            sub = None
        else:
            m = layer_re.match(name)
            if not m:
                raise ConvertError(f"tensor {src_name}: not a recognised {arch} text-decoder tensor")
            bid, sub = int(m.group(1)), m.group(2)
            if bid >= n_layer:
                raise ConvertError(f"tensor {src_name}: layer {bid} >= num_hidden_layers {n_layer}")
            if sub not in lmap:
                raise ConvertError(f"tensor {src_name}: no GGUF name for '{sub}' in arch {arch}")
            gname = f"blk.{bid}.{lmap[sub]}"
            seen.setdefault(bid, set()).add(sub)
        if gname in items:
            raise ConvertError(f"tensor {src_name}: maps to {gname}, which another tensor already produced")
        shape = list(t.shape)
        it = Item(gname, t, None)
        if arch == "qwen35" and sub is not None:
            if sub.endswith("norm.weight") and sub != "linear_attn.norm.weight":
                it.add_one = True  # HF Qwen3.5 RMSNorm multiplies by (1 + w); GGUF stores 1 + w
            if sub == "linear_attn.A_log":
                it.neg_exp = True
            if sub == "linear_attn.conv1d.weight":
                if len(shape) == 3 and shape[1] == 1:
                    shape = [shape[0], shape[2]]
                    it.squeeze_conv = True
                elif len(shape) != 2:
                    raise ConvertError(f"tensor {src_name}: conv1d shape {t.shape}, want [C,1,K]")
            if reorder and sub.startswith("linear_attn."):
                if sub in ("linear_attn.in_proj_qkv.weight", "linear_attn.conv1d.weight"):
                    if shape[0] != 2 * key_dim + n_v * dv:
                        raise ConvertError(f"tensor {src_name}: {shape[0]} rows, want 2*{key_dim}+{n_v * dv}")
                    it.row_perm = np.concatenate([np.arange(2 * key_dim), 2 * key_dim + v_head_perm(n_k, n_v, dv)])
                elif sub == "linear_attn.in_proj_z.weight":
                    it.row_perm = v_head_perm(n_k, n_v, dv)
                elif sub in ("linear_attn.in_proj_b.weight", "linear_attn.in_proj_a.weight",
                             "linear_attn.A_log", "linear_attn.dt_bias"):
                    it.row_perm = v_head_perm(n_k, n_v, 1)
                elif sub == "linear_attn.out_proj.weight":
                    it.col_perm = v_head_perm(n_k, n_v, dv)
                if it.row_perm is not None and len(it.row_perm) != shape[0]:
                    raise ConvertError(f"tensor {src_name}: {shape[0]} rows, want {len(it.row_perm)} for the V-head reorder")
                if it.col_perm is not None and (len(shape) != 2 or len(it.col_perm) != shape[1]):
                    raise ConvertError(f"tensor {src_name}: shape {t.shape}, want {len(it.col_perm)} columns")
        it.shape = shape
        it.qtype = pick_type(gname, shape, want, overrides)
        items[gname] = it

    if "token_embd.weight" not in items:
        raise ConvertError("checkpoint has no model.embed_tokens.weight")
    if "output_norm.weight" not in items:
        raise ConvertError("checkpoint has no model.norm.weight")
    check_layers(arch, hp, seen)
    for j in range(n_mtp):
        got = seen.get(n_layer + j, set())
        missing = sorted((set(COMMON_SUBS) | set(ATTN_SUBS)) - got)
        if missing:
            raise ConvertError(f"MTP layer {j}: missing mtp.layers.{j}.{missing[0]}")
    for k in ("fc.weight", "pre_fc_norm_embedding.weight", "pre_fc_norm_hidden.weight") if n_mtp else ():
        if f"blk.{n_layer}.{MTP_MAP[k]}" not in items:
            raise ConvertError(f"MTP block: missing mtp.{k}")
    if not tied and "output.weight" not in items:
        raise ConvertError("config says tie_word_embeddings=false but the checkpoint has no lm_head.weight")

    def order(g):
        if g == "token_embd.weight":
            return (0, 0, g)
        m = re.match(r"blk\.(\d+)\.", g)
        if m:
            return (1, int(m.group(1)), g)
        return (2, 0, g)
    return [items[g] for g in sorted(items, key=order)], skipped, n_mtp


# ---------------------------------------------------------------------------------------------
# conversion of one tensor, chunk by chunk

def out_byte_shape(it):
    if it.qtype == QT.F32:
        return tuple(it.shape), np.float32
    if it.qtype == QT.F16:
        return tuple(it.shape), np.float16
    return tuple(gguf.quant_shape_to_byte_shape(it.shape, it.qtype)), np.uint8


def convert_rows(it, f32_rows):
    x = f32_rows
    if it.squeeze_conv:
        x = x.reshape(x.shape[0], -1)
    if it.col_perm is not None:
        x = x[:, it.col_perm]
    if it.add_one:
        x = x + np.float32(1.0)
    if it.neg_exp:
        x = -np.exp(x)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if it.qtype == QT.F32:
        return x
    return gguf.quants.quantize(x, it.qtype)


def materialize(it):
    src = it.src.array()
    bshape, bdtype = out_byte_shape(it)
    out = np.empty(bshape, dtype=bdtype)
    if len(it.shape) == 1:
        v = to_f32(src.reshape(-1), it.src.dtype)
        if it.row_perm is not None:
            v = v[it.row_perm]
        out[...] = _convert_1d(it, v)  # 1-D tensors are always F32
        return out
    n_rows = it.shape[0]
    row_elems = int(np.prod(src.shape[1:]))
    step = max(1, CHUNK_ELEMS // max(1, row_elems))
    for r0 in range(0, n_rows, step):
        r1 = min(n_rows, r0 + step)
        idx = it.row_perm[r0:r1] if it.row_perm is not None else slice(r0, r1)
        rows = to_f32(src[idx], it.src.dtype)
        out[r0:r1] = convert_rows(it, rows)
    return out


def _convert_1d(it, v):
    x = v
    if it.add_one:
        x = x + np.float32(1.0)
    if it.neg_exp:
        x = -np.exp(x)
    return np.ascontiguousarray(x, dtype=np.float32)


# ---------------------------------------------------------------------------------------------
# metadata

def write_metadata(w, arch, hp, ftype, model_dir, n_mtp=0):
    w.add_type(gguf.GGUFType.MODEL)
    w.add_name(Path(model_dir).resolve().name)
    n_layer = int(need(hp, "num_hidden_layers"))
    w.add_block_count(n_layer + n_mtp)
    if n_mtp:
        w.add_nextn_predict_layers(n_mtp)
    if hp.get("max_position_embeddings") is not None:
        w.add_context_length(int(hp["max_position_embeddings"]))
    w.add_embedding_length(int(need(hp, "hidden_size")))
    w.add_feed_forward_length(int(need(hp, "intermediate_size")))
    n_head = int(need(hp, "num_attention_heads"))
    w.add_head_count(n_head)
    w.add_head_count_kv(int(hp.get("num_key_value_heads") or n_head))
    rp = hp["_rope"]
    if arch == "qwen35":
        sec = list(rp.get("mrope_section") or [11, 11, 10])  # llama.cpp requires the key; HF default
        if len(sec) > 4:
            raise ConvertError(f"config.json: mrope_section {sec} has more than 4 entries")
        w.add_rope_dimension_sections([int(s) for s in sec] + [0] * (4 - len(sec)))
    if rp.get("rope_type") not in (None, "default"):
        raise ConvertError(f"config.json: rope_type {rp.get('rope_type')!r} not supported (only default)")
    w.add_rope_freq_base(float(need(rp, "rope_theta")))
    w.add_layer_norm_rms_eps(float(need(hp, "rms_norm_eps")))
    head_dim = int(hp.get("head_dim") or int(need(hp, "hidden_size")) // n_head)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_file_type(int(ftype))
    if arch == "qwen35":
        n_v = int(need(hp, "linear_num_value_heads"))
        w.add_ssm_conv_kernel(int(need(hp, "linear_conv_kernel_dim")))
        w.add_ssm_state_size(int(need(hp, "linear_key_head_dim")))
        w.add_ssm_group_count(int(need(hp, "linear_num_key_heads")))
        w.add_ssm_time_step_rank(n_v)
        w.add_ssm_inner_size(int(need(hp, "linear_value_head_dim")) * n_v)
        w.add_full_attention_interval(full_attention_interval(hp))
        w.add_rope_dimension_count(int(head_dim * float(rp.get("partial_rotary_factor", 0.25))))
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    write_sampling(w, model_dir)


# generation_config.json key -> (general.sampling.* key, type): the model's recommended sampler
SAMPLING_KEYS = {"temperature": ("general.sampling.temp", float), "top_k": ("general.sampling.top_k", int),
                 "top_p": ("general.sampling.top_p", float), "min_p": ("general.sampling.min_p", float),
                 "repetition_penalty": ("general.sampling.penalty_repeat", float)}


def write_sampling(w, model_dir):
    """The recommended sampler from generation_config.json as llama.cpp's general.sampling.* keys
    (the engine's kz_gen_default_params and `kazeia run` use them); do_sample false = greedy."""
    path = Path(model_dir) / "generation_config.json"
    if not path.exists():
        return
    try:
        gc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConvertError(f"{path}: cannot read ({e})")
    if not isinstance(gc, dict):
        raise ConvertError(f"{path}: not a JSON object")
    if gc.get("do_sample") is False:
        w.add_float32("general.sampling.temp", 0.0)
        return
    for hk, (gk, ty) in SAMPLING_KEYS.items():
        v = gc.get(hk)
        if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if ty is int:
            w.add_int32(gk, int(v))
        else:
            w.add_float32(gk, float(v))


def pick_pre(ct, arch, model_dir):
    """tokenizer.ggml.pre names the pre-tokenizer regex, which belongs to the tokenizer, not to
    the architecture (llama.cpp also derives it from the tokenizer): match tokenizer.json's Split
    regex, else default to the arch's own tokenizer (qwen35 -> "qwen35", qwen3 -> "qwen2")."""
    default = "qwen35" if arch == "qwen35" else "qwen2"
    try:
        tj = json.loads((Path(model_dir) / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ConvertError(f"{model_dir}/tokenizer.json: cannot read ({e})")
    pt = tj.get("pre_tokenizer") or {}
    for p in pt.get("pretokenizers", [pt]):
        if isinstance(p, dict) and p.get("type") == "Split":
            rx = (p.get("pattern") or {}).get("Regex")
            for name, known in getattr(ct, "PRE_REGEX", {}).items():
                if rx == known:
                    return name
    return default


def write_tokenizer(w, arch, hp, model_dir):
    try:
        import convert_tokenizer as ct
    except ImportError as e:
        raise ConvertError(f"tools/convert_tokenizer.py (write_tokenizer_kvs) not importable: {e}")
    pre = pick_pre(ct, arch, model_dir)
    try:
        ct.write_tokenizer_kvs(w, str(model_dir), pre, pad_to=int(need(hp, "vocab_size")))
    except (OSError, ValueError, KeyError) as e:
        raise ConvertError(f"tokenizer: {e}")
    return pre


# ---------------------------------------------------------------------------------------------

def parse_overrides(specs):
    out = []
    for spec in specs or ():
        pat, sep, t = spec.rpartition("=")
        if not sep or not pat or t not in OUT_TYPES:
            raise ConvertError(f"--tensor-type {spec!r}: want REGEX=TYPE with TYPE one of {', '.join(OUT_TYPES)}")
        try:
            out.append((re.compile(pat), OUT_TYPES[t][0]))
        except re.error as e:
            raise ConvertError(f"--tensor-type {spec!r}: bad regex ({e})")
    return out


def convert(model_dir, out_path, out_type="f16", verbose=True, tensor_types=(), keep_mtp=True):
    """tensor_types: ["REGEX=TYPE", ...] per-tensor type overrides for 2-D weights (matched
    against the GGUF tensor name); 1-D tensors, norms, ssm_conv1d/alpha/beta always stay F32."""
    if out_type not in OUT_TYPES:
        raise ConvertError(f"--type {out_type!r}: want one of {', '.join(OUT_TYPES)}")
    want, ftype = OUT_TYPES[out_type]
    overrides = parse_overrides(tensor_types)
    hf_arch, arch, hp = load_hparams(model_dir)
    tensors = index_checkpoint(model_dir)
    plan, skipped, n_mtp = build_plan(tensors, arch, hp, want, overrides, keep_mtp)
    vocab = int(need(hp, "vocab_size"))
    emb = next(it for it in plan if it.gname == "token_embd.weight")
    if emb.shape[0] != vocab:
        raise ConvertError(f"model.embed_tokens.weight has {emb.shape[0]} rows, config vocab_size is {vocab}")

    out_path = Path(out_path)
    tmp = out_path.with_name(f"{out_path.name}.{os.getpid()}.tmp")  # unique: concurrent runs don't collide
    w = gguf.GGUFWriter(str(tmp), arch)
    try:
        write_metadata(w, arch, hp, ftype, model_dir, n_mtp)
        pre = write_tokenizer(w, arch, hp, model_dir)
        for it in plan:
            bshape, bdtype = out_byte_shape(it)
            nbytes = int(np.prod(bshape)) * np.dtype(bdtype).itemsize
            w.add_tensor_info(it.gname, bshape, np.dtype(bdtype), nbytes,
                              raw_dtype=it.qtype if bdtype == np.uint8 else None)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for it in plan:
            data = materialize(it)
            w.write_tensor_data(data)
            if verbose:
                print(f"  {it.gname:<32} {str(list(it.src.shape)):<18} {it.src.dtype:>4} -> {it.qtype.name:<5} "
                      f"ne={list(reversed(it.shape))}", file=sys.stderr)
            del data
        w.close()
    except BaseException:
        try:
            w.close()
        except Exception:
            pass
        if tmp.exists():
            tmp.unlink()
        raise
    os.replace(tmp, out_path)
    if verbose:
        print(f"wrote {out_path}: arch {arch} ({hf_arch}), tokenizer pre {pre}, {len(plan)} tensors, type {out_type}; "
              f"skipped {len(skipped)} ({', '.join(skipped[:4])}{'...' if len(skipped) > 4 else ''})", file=sys.stderr)
    return out_path


def main(argv=None):
    ap = argparse.ArgumentParser(description="Convert a Qwen3.5 / Qwen3 Hugging Face checkpoint to GGUF.")
    ap.add_argument("model_dir", help="directory with config.json, *.safetensors and tokenizer.json")
    ap.add_argument("out", help="output .gguf path")
    ap.add_argument("--type", default="f16", choices=sorted(OUT_TYPES), help="type for 2-D weight matrices")
    ap.add_argument("--tensor-type", action="append", metavar="REGEX=TYPE",
                    help="override the type of matching 2-D tensors, e.g. 'ffn_down=q8_0' (repeatable)")
    ap.add_argument("--no-mtp", action="store_true", help="drop the MTP (multi-token-prediction) block")
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    try:
        convert(a.model_dir, a.out, a.type, verbose=not a.quiet, tensor_types=a.tensor_type,
                keep_mtp=not a.no_mtp)
    except ConvertError as e:
        print(f"convert_hf: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
