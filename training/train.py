#!/usr/bin/env python3
"""Train (or resume) the default model on CPU (or a GPU when one is there).

    nohup nice -n 19 python3 training/train.py --run /work/train-state/run1 > /work/train-state/run1.log 2>&1 &

Resumes automatically from RUN/ckpt.pt (model, optimizer, step, data-sampler and torch RNG
states): kill it (SIGTERM saves first) and start the same command again. Writes every
--ckpt-minutes RUN/ckpt.pt (atomic rename), RUN/best.pt (weights with the lowest held-out loss,
see --eval-every), RUN/loss.csv and RUN/config.json. Model/data shape options only apply to a
fresh run; a resumed run keeps its stored config (--max-steps, --lr and --batch may be changed,
e.g. a larger --batch on a GPU).
"""
import argparse
import csv
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import Model, make_config  # noqa: E402

SHAPE = dict(d=256, n_layer=8, ffn=768, n_head=4, n_kv=2, head_dim=64, gdn_k=2, gdn_v=4, gdn_hd=64,
             attn_every=4, ctx=512)


def atomic_save(obj, path):
    tmp = Path(str(path) + ".tmp")
    torch.save(obj, tmp)
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    tmp.replace(path)


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (step + 1) / a.warmup
    p = min(1.0, (step - a.warmup) / max(1, a.max_steps - a.warmup))
    return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def heldout_batches(tokens, T, n):
    """n fixed, evenly spaced windows of the held-out stream (deterministic, same every eval)."""
    starts = np.linspace(0, len(tokens) - T - 2, n).astype(np.int64)
    return torch.from_numpy(np.stack([tokens[s:s + T + 1].astype(np.int64) for s in starts]))


@torch.no_grad()
def evaluate(model, held, bs=8):
    model.eval()
    ce = mce = 0.0
    for i in range(0, len(held), bs):
        c, m = model.losses(held[i:i + bs])
        ce += c.item() * len(held[i:i + bs])
        mce += m.item() * len(held[i:i + bs])
    model.train()
    return ce / len(held), mce / len(held)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default="/work/train-state/run1")
    ap.add_argument("--tokens", default="/work/train-state/tokens")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=None, help="sequences per step (default 8; may change on resume)")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--max-steps", type=int, default=20000)
    ap.add_argument("--wd", type=float, default=0.1)
    ap.add_argument("--mtp-lambda", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-minutes", type=float, default=10.0)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--eval-windows", type=int, default=32)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--stop-after-steps", type=int, default=0, help="exit (after saving) at this step")
    a = ap.parse_args(argv)

    torch.set_num_threads(a.threads)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    run = Path(a.run)
    run.mkdir(parents=True, exist_ok=True)
    ckpt_path = run / "ckpt.pt"
    train = np.memmap(Path(a.tokens) / "train.u16", dtype=np.uint16, mode="r")
    held = heldout_batches(np.fromfile(Path(a.tokens) / "heldout.u16", dtype=np.uint16), a.seq,
                           a.eval_windows).to(dev)

    state = torch.load(ckpt_path, map_location="cpu", weights_only=False) if ckpt_path.exists() else None
    if state:
        shape, hp = state["shape"], state["hparams"]
        for k in ("seq", "vocab", "mtp_lambda", "wd", "warmup", "min_lr_frac"):
            setattr(a, k, hp[k])
        if a.batch is None:
            a.batch = hp["batch"]
        print(f"resuming {ckpt_path} at step {state['step']}", flush=True)
    else:
        shape = dict(SHAPE)
    a.batch = a.batch or 8
    cfg = make_config(a.vocab, **shape, eot_id=0)
    torch.manual_seed(a.seed)
    model = Model(cfg).to(dev)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.ndim >= 2 and "embed_tokens" not in n else no_decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    rng = np.random.default_rng(a.seed)
    step, tokens_seen, elapsed, best = 0, 0, 0.0, float("inf")
    if state:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        rng.bit_generator.state = state["np_rng"]
        torch.set_rng_state(state["torch_rng"])
        step, tokens_seen, elapsed, best = state["step"], state["tokens"], state["elapsed"], state["best"]
    hparams = {k: getattr(a, k) for k in ("seq", "batch", "vocab", "mtp_lambda", "wd", "warmup", "min_lr_frac",
                                          "lr", "max_steps")}
    n_params = sum(p.numel() for p in model.parameters())
    (run / "config.json").write_text(json.dumps({"shape": shape, "hparams": hparams, "params": n_params,
                                                 "hf_config": cfg.to_dict()}, indent=1, default=str) + "\n")
    print(f"params {n_params} ({n_params / 1e6:.2f} M), train tokens {len(train)}, device {dev}", flush=True)

    def save(reason):
        atomic_save({"model": model.state_dict(), "opt": opt.state_dict(), "np_rng": rng.bit_generator.state,
                     "torch_rng": torch.get_rng_state(), "step": step, "tokens": tokens_seen,
                     "elapsed": elapsed, "best": best, "shape": shape, "hparams": hparams}, ckpt_path)
        print(f"saved {ckpt_path} at step {step} ({reason})", flush=True)

    stop = {"flag": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.__setitem__("flag", True))
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__("flag", True))

    new_log = not (run / "loss.csv").exists()
    logf = open(run / "loss.csv", "a", newline="")
    log = csv.writer(logf)
    if new_log:
        log.writerow(["step", "tokens", "elapsed_s", "lr", "loss", "mtp_loss", "heldout_loss",
                      "heldout_mtp_loss", "tok_per_s"])
    last_ckpt = time.time()
    acc = [0.0, 0.0, 0]
    t_log = time.time()
    T, B = a.seq, a.batch
    while step < a.max_steps and not stop["flag"]:
        t0 = time.time()
        starts = rng.integers(0, len(train) - T - 2, B)
        x = torch.from_numpy(np.stack([train[s:s + T + 1].astype(np.int64) for s in starts])).to(dev)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        ce, mce = model.losses(x)
        loss = ce + a.mtp_lambda * mce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += B * T
        elapsed += time.time() - t0
        acc[0] += ce.item(); acc[1] += mce.item(); acc[2] += 1
        do_eval = step % a.eval_every == 0 or step == a.max_steps
        if step % a.log_every == 0 or do_eval:
            hl = hm = ""
            if do_eval:
                hl, hm = evaluate(model, held)
                if hl < best:
                    best = hl
                    atomic_save({"model": model.state_dict(), "step": step, "tokens": tokens_seen,
                                 "heldout_loss": hl, "shape": shape, "hparams": hparams}, run / "best.pt")
            tps = acc[2] * B * T / (time.time() - t_log)
            log.writerow([step, tokens_seen, f"{elapsed:.1f}", f"{lr_at(step - 1, a):.3e}", f"{acc[0] / acc[2]:.4f}",
                          f"{acc[1] / acc[2]:.4f}", f"{hl:.4f}" if hl != "" else "", f"{hm:.4f}" if hm != "" else "",
                          f"{tps:.0f}"])
            logf.flush()
            print(f"step {step} tok {tokens_seen} loss {acc[0] / acc[2]:.4f} mtp {acc[1] / acc[2]:.4f} "
                  f"{'held ' + format(hl, '.4f') + ' ' + format(hm, '.4f') + ' ' if hl != '' else ''}"
                  f"{tps:.0f} tok/s", flush=True)
            acc = [0.0, 0.0, 0]
            t_log = time.time()
        if time.time() - last_ckpt > a.ckpt_minutes * 60:
            save("periodic")
            last_ckpt = time.time()
        if a.stop_after_steps and step >= a.stop_after_steps:
            break
    save("stop" if stop["flag"] else "end")
    logf.close()


if __name__ == "__main__":
    main()
