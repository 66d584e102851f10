"""The default model's training pipeline (training/), checked without training anything.

- tokenizer: the committed training/tokenizer (trained by training/train_tokenizer.py) put in a
  GGUF by tools/convert_tokenizer.py; `kazeia tokenize --special` must give HF tokenizers' ids
  on English, French and ChatML text.
- model: training/model.py's MTP head is causal (changing token j changes no MTP logit before
  j-1) and reads h_t after the trunk's final norm; its losses are the CEs of the right shifts.
- export: a small random-weight Model (the training architecture, shrunk) written by
  training/export.py reloads in transformers with the same logits, keeps mtp.* with the real
  Qwen3.5 names, converts with tools/convert_hf.py, and the engine's F32 logits match
  transformers' (1e-4 relative, same argmax).
"""
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kzutil

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "training"))
sys.path.insert(0, str(REPO / "tools"))
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TEXT = ("The Count of Monte Cristo, by Alexandre Dumas: « Le 24 février 1815, la vigie de "
        "Notre-Dame de la Garde signala le trois-mâts le Pharaon. » Don't install it twice; "
        "l'installation d'un paquet se fait avec apt-get install paquet.\n\n  Fin.   \n"
        "<|im_start|>user\nBonjour<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nSalut !"
        "<|endoftext|>12345 ÉÀÇ œuvre naïve")


def test_tokenizer_engine_matches_hf(tmp_path, kazeia):
    from tokenizers import Tokenizer
    import convert_tokenizer
    tdir = REPO / "training" / "tokenizer"
    gg = tmp_path / "tok.gguf"
    assert convert_tokenizer.main([str(tdir), str(gg), "--pre", "qwen35", "--arch", "qwen35"]) == 0
    f = tmp_path / "t.txt"
    f.write_text(TEXT, encoding="utf-8")
    ref = Tokenizer.from_file(str(tdir / "tokenizer.json")).encode(TEXT).ids
    out = subprocess.run([str(kazeia), "tokenize", "--special", "-m", str(gg), "-f", str(f)],
                         check=True, capture_output=True, text=True).stdout
    assert [int(x) for x in out.split()] == ref
    assert len(ref) > 40 and {1, 2, 3, 4, 0} <= set(ref)  # the ChatML/think specials are single ids


def small_model(seed=0):
    from model import Model, make_config
    torch.manual_seed(seed)
    cfg = make_config(4096, d=64, n_layer=4, ffn=128, n_head=4, n_kv=2, head_dim=16, gdn_k=2, gdn_v=4,
                      gdn_hd=16, attn_every=2, ctx=256)
    m = Model(cfg)
    with torch.no_grad():  # trained-looking scales: zero-init norms and tiny outputs would hide bugs
        for n, p in m.named_parameters():
            if n.endswith("norm.weight"):
                p.uniform_(-0.5, 0.5)
            elif p.ndim == 2:
                p.normal_(0, 0.8 / p.shape[1] ** 0.5)
        m.lm.model.embed_tokens.weight.normal_(0, 0.5)
    return m.eval()


def test_mtp_head_causal_and_shifted():
    m = small_model()
    ids = torch.randint(5, 4096, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        lg, ml = m(ids)
        j = 25
        ids2 = ids.clone()
        ids2[0, j] = (ids[0, j] + 7) % 4096
        lg2, ml2 = m(ids2)
        # MTP position t reads ids[t+1] and h_t: position j-1 is the first one token j reaches
        assert torch.equal(ml[0, :j - 1], ml2[0, :j - 1])
        assert not torch.allclose(ml[0, j - 1], ml2[0, j - 1])
        # h_t is taken after the final norm: changing model.norm changes the MTP logits too
        ce, mce = m.losses(ids)
        V = lg.shape[-1]
        F = torch.nn.functional
        assert torch.allclose(ce, F.cross_entropy(lg[0, :-1], ids[0, 1:]))
        assert torch.allclose(mce, F.cross_entropy(ml[0, :-1], ids[0, 2:]))
        m.lm.model.norm.weight.add_(0.3)
        _, ml3 = m(ids)
        assert not torch.allclose(ml, ml3)
        assert ml.shape == (1, 39, V)


def test_export_reload_convert_engine(tmp_path, kazeia):
    import export
    import convert_hf
    from safetensors import safe_open
    m = small_model(seed=2)
    ck = tmp_path / "ckpt.pt"
    torch.save({"model": m.state_dict(), "step": 0, "tokens": 0, "hparams": {"vocab": 4096},
                "shape": dict(d=64, n_layer=4, ffn=128, n_head=4, n_kv=2, head_dim=16, gdn_k=2, gdn_v=4,
                              gdn_hd=16, attn_every=2, ctx=256)}, ck)
    out = tmp_path / "hf"
    m2 = export.export(ck, out, REPO / "training" / "tokenizer")
    export.verify(m2, out)  # raises when transformers' reload or the mtp.* reload differ
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = set(f.keys())
    for n in ("mtp.fc.weight", "mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight",
              "mtp.norm.weight", "mtp.layers.0.self_attn.q_proj.weight", "mtp.layers.0.mlp.down_proj.weight",
              "model.embed_tokens.weight", "model.layers.0.linear_attn.in_proj_qkv.weight",
              "model.layers.1.self_attn.q_proj.weight"):
        assert n in names, n
    assert "lm_head.weight" not in names  # tied, as Qwen3.5's small checkpoints
    gg = tmp_path / "m.gguf"
    convert_hf.convert(out, gg, "f32", verbose=False)
    toks = [int(t) for t in torch.randint(5, 4096, (60,), generator=torch.Generator().manual_seed(3))]
    from transformers import Qwen3_5ForCausalLM
    hf = Qwen3_5ForCausalLM.from_pretrained(str(out), dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        ref = hf(input_ids=torch.tensor([toks])).logits[0].numpy()
    got = kzutil.kz_logits(str(gg), toks, prefill=56, n_vocab=4096)
    rel = kzutil.rel_err(got, ref)
    assert rel.max() < 1e-4, rel.max()
    assert kzutil.top1(got, ref) == 1.0
