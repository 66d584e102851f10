#!/usr/bin/env python3
"""Export a training checkpoint as a Hugging Face Qwen3.5 checkpoint (+ the MTP head).

    python3 training/export.py RUN/best.pt OUT_DIR [--tokenizer /work/train-state/tokenizer]

OUT_DIR gets model.safetensors (F32; trunk named as Qwen3_5ForCausalLM saves it: model.*, the
tied lm_head omitted; MTP head named as in the released Qwen3.5 checkpoints: mtp.fc,
mtp.pre_fc_norm_embedding, mtp.pre_fc_norm_hidden, mtp.layers.0.*, mtp.norm), config.json
(Qwen3_5TextConfig + mtp_num_hidden_layers), generation_config.json, tokenizer.json and
tokenizer_config.json. Then checks the export: transformers' Qwen3_5ForCausalLM.from_pretrained
must give the training model's logits, and the mtp.* tensors reloaded must give its MTP logits.
Convert with: python3 tools/convert_hf.py OUT_DIR model.gguf --type f32|f16|q8_0
"""
import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import MTPHead, Model, make_config  # noqa: E402


def load_training_model(ckpt_path):
    st = torch.load(ckpt_path, map_location="cpu", weights_only=False)
    cfg = make_config(st["hparams"]["vocab"], **st["shape"], eot_id=0)
    m = Model(cfg)
    m.load_state_dict(st["model"])
    m.eval()
    return m, st


def export(ckpt_path, out, tokenizer_dir):
    m, st = load_training_model(ckpt_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for k, v in m.lm.state_dict().items():
        if k != "lm_head.weight":  # tied to model.embed_tokens.weight
            tensors[k] = v.detach().float().contiguous().clone()
    for k, v in m.mtp.state_dict().items():
        tensors["mtp." + k] = v.detach().float().contiguous().clone()
    tmp = out / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    cfg = m.cfg.to_dict()
    cfg.update({"architectures": ["Qwen3_5ForCausalLM"], "model_type": "qwen3_5_text",
                "mtp_num_hidden_layers": 1, "mtp_use_dedicated_embeddings": False, "dtype": "float32",
                "_name_or_path": "kazeia-default"})
    cfg.pop("attn_implementation", None)
    (out / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [0, 2], "pad_token_id": 0, "do_sample": True, "temperature": 0.7, "top_k": 40,
         "top_p": 0.95, "repetition_penalty": 1.1}, indent=1) + "\n")
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(Path(tokenizer_dir) / fn, out / fn)
    n = sum(v.numel() for v in tensors.values())
    print(f"wrote {out}: {len(tensors)} tensors, {n} parameters (step {st['step']}, {st['tokens']} tokens)")
    return m


@torch.no_grad()
def verify(m, out):
    from transformers import Qwen3_5ForCausalLM
    hf = Qwen3_5ForCausalLM.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager").eval()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, m.cfg.vocab_size, (2, 64), generator=g)
    ref, ref_mtp = m(ids)
    got = hf(input_ids=ids).logits
    d = (got - ref).abs().max().item()
    # the same MTP head rebuilt from the exported mtp.* tensors
    head = MTPHead(m.cfg)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        head.load_state_dict({k[4:]: f.get_tensor(k) for k in f.keys() if k.startswith("mtp.")})
    m2 = Model(m.cfg)
    m2.lm = hf
    m2.mtp = head.eval()
    _, got_mtp = m2(ids)
    dm = (got_mtp - ref_mtp).abs().max().item()
    print(f"verify: transformers logits max|diff| {d:.2e}, MTP logits max|diff| {dm:.2e} "
          f"(logit scale {ref.abs().max().item():.2f})")
    if d > 1e-3 or dm > 1e-3:
        raise SystemExit("export check failed: reloaded model differs from the trained one")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--tokenizer", default="/work/train-state/tokenizer")
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    m = export(a.ckpt, a.out, a.tokenizer)
    verify(m, Path(a.out))


if __name__ == "__main__":
    main()
