#!/usr/bin/env python3
"""Loss curve of a training run: RUN/loss.csv -> PNG (needs matplotlib).

    python3 training/plot_loss.py /work/train-state/run1/loss.csv training/loss.png

Train loss (trunk next-token CE and the MTP head's t+2 CE, averaged over each log interval) and
held-out loss (the fixed held-out windows of train.py's evaluation) against tokens seen.
"""
import csv
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        sys.exit(__doc__)
    rows = list(csv.DictReader(open(argv[0])))
    if not rows:
        sys.exit(f"{argv[0]}: no rows yet")
    tok = [int(r["tokens"]) / 1e6 for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(tok, [float(r["loss"]) for r in rows], lw=1, label="train CE (trunk, next token)")
    ax.plot(tok, [float(r["mtp_loss"]) for r in rows], lw=1, label="train CE (MTP head, token t+2)")
    ev = [r for r in rows if r["heldout_loss"]]
    if ev:
        ax.plot([int(r["tokens"]) / 1e6 for r in ev], [float(r["heldout_loss"]) for r in ev], "o-", ms=3,
                label="held-out CE (trunk)")
        ax.plot([int(r["tokens"]) / 1e6 for r in ev], [float(r["heldout_mtp_loss"]) for r in ev], "s--", ms=3,
                label="held-out CE (MTP)")
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title(f"default model: step {rows[-1]['step']}, {tok[-1]:.2f} M tokens")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = argv[1] + ".tmp.png"
    fig.savefig(tmp)
    import os
    os.replace(tmp, argv[1])
    print(f"wrote {argv[1]} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
