#!/usr/bin/env python3
"""Held-out perplexity, MTP acceptance and samples of an exported default model (torch).

    python3 training/evaluate.py HF_DIR [--corpus /work/train-state/corpus] [--ctx 256] [--json OUT]

Perplexity as llama-perplexity computes it (so the engine's and llama.cpp's numbers compare):
the text (heldout_plain*.txt, tokenised by HF tokenizers, no BOS) is cut into non-overlapping
windows of --ctx tokens, each run from an empty state, and only the second half of each window
is scored (positions ctx/2 .. ctx-2 predicting the next token). Reported: ppl and its standard
error (delta method over the per-token NLLs).

MTP acceptance: on the same windows, the MTP head at position t (trunk hidden h_t + the true
token t+1) drafts token t+2 greedily; it is "accepted" when it equals the trunk's own greedy
prediction at t+1 (what a greedy speculative step would keep). Also its top-1 accuracy against
the true token t+2, next to the trunk's against t+1.

Samples: plain continuations (top-k 40, T 0.7, seeded) of English and French prompts, and one
chat turn rendered as `kazeia run` renders it.
"""
import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import safe_open

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import MTPHead, Model  # noqa: E402

PROMPTS = ["The ship", "Alice was", "To install a package, ", "Le comte", "Il était une fois",
           "Pour installer un paquet, "]
CHAT = ["Bonjour", "Hello, who are you?"]


def load(hf_dir):
    from transformers import Qwen3_5ForCausalLM
    hf = Qwen3_5ForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    m = Model(hf.config)
    m.lm = hf
    with safe_open(str(Path(hf_dir) / "model.safetensors"), "pt") as f:
        m.mtp.load_state_dict({k[4:]: f.get_tensor(k) for k in f.keys() if k.startswith("mtp.")})
    return m.eval()


@torch.no_grad()
def score(m, ids, ctx, bs=8, max_windows=0):
    n = len(ids) // ctx
    if max_windows:
        n = min(n, max_windows)
    w = torch.tensor(ids[:n * ctx], dtype=torch.long).view(n, ctx)
    nll, acc_t, acc_m, accept = [], [], [], []
    half = ctx // 2
    for i in range(0, n, bs):
        x = w[i:i + bs]
        lg, ml = m(x)
        lp = F.log_softmax(lg[:, half:-1].float(), -1)
        tgt = x[:, half + 1:]
        nll.append(-lp.gather(-1, tgt[..., None])[..., 0].reshape(-1))
        tg = lg.argmax(-1)           # trunk greedy: tg[t] predicts x[t+1]
        mg = ml.argmax(-1)           # MTP draft: mg[t] predicts x[t+2]
        acc_t.append((tg[:, half:-1] == x[:, half + 1:]).reshape(-1).float())
        acc_m.append((mg[:, half:-1] == x[:, half + 2:]).reshape(-1).float())
        accept.append((mg[:, half:-1] == tg[:, half + 1:-1]).reshape(-1).float())
    nll = torch.cat(nll).double()
    mean, sd = nll.mean().item(), nll.std().item()
    ppl = math.exp(mean)
    return {"windows": n, "scored_tokens": int(nll.numel()), "ppl": ppl,
            "ppl_stderr": ppl * sd / math.sqrt(nll.numel()), "nll": mean,
            "trunk_top1": torch.cat(acc_t).mean().item(), "mtp_top1": torch.cat(acc_m).mean().item(),
            "mtp_acceptance": torch.cat(accept).mean().item()}


@torch.no_grad()
def sample(m, tok, text, n=60, seed=0, chat=False):
    if chat:
        text = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    ids = tok.encode(text).ids
    g = torch.Generator().manual_seed(seed)
    # own sampling loop (no cache: short outputs): deterministic with a torch.Generator
    x = list(ids)
    for _ in range(n):
        lg = m.lm(input_ids=torch.tensor([x[-512:]])).logits[0, -1] / 0.7
        v, i = lg.topk(40)
        nxt = i[torch.multinomial(F.softmax(v, -1), 1, generator=g)].item()
        if nxt in (0, 2):
            break
        x.append(nxt)
    return tok.decode(x[len(ids):], skip_special_tokens=False)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("hf_dir")
    ap.add_argument("--corpus", default="/work/train-state/corpus")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--json")
    ap.add_argument("--no-samples", action="store_true")
    ap.add_argument("--max-windows", type=int, default=0, help="score only the first N windows (quick look)")
    ap.add_argument("--per-language", action="store_true", help="the English and French parts, each alone")
    a = ap.parse_args(argv)
    torch.set_num_threads(2)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(Path(a.hf_dir) / "tokenizer.json"))
    m = load(a.hf_dir)
    res = {}
    # the whole file starts with its English part: with --max-windows its first windows would
    # just repeat the English row, so per language it is the two parts alone
    names = ["heldout_plain_en", "heldout_plain_fr"] if a.per_language else ["heldout_plain"]
    for name in names:
        ids = tok.encode((Path(a.corpus) / f"{name}.txt").read_text(encoding="utf-8")).ids
        r = score(m, ids, a.ctx, max_windows=a.max_windows)
        res[name] = r
        print(f"{name}: ppl {r['ppl']:.3f} +/- {r['ppl_stderr']:.3f} ({r['scored_tokens']} scored tokens, ctx {a.ctx}); "
              f"trunk top-1 {r['trunk_top1']:.3f}, MTP top-1 {r['mtp_top1']:.3f}, "
              f"MTP acceptance vs trunk greedy {r['mtp_acceptance']:.3f}", flush=True)
    if not a.no_samples:
        res["samples"] = {}
        for p in PROMPTS:
            s = sample(m, tok, p)
            res["samples"][p] = s
            print(f"--- {p!r}\n{p}{s}", flush=True)
        for p in CHAT:
            s = sample(m, tok, p, chat=True)
            res["samples"]["chat: " + p] = s
            print(f"--- chat {p!r}\n{s}", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
