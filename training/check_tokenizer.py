#!/usr/bin/env python3
"""Check that the engine tokenises exactly as HF `tokenizers` with the default model's tokenizer.

    python3 training/check_tokenizer.py GGUF TOKENIZER_DIR TEXT... [--kazeia build/kazeia]

For each TEXT file: ids from `kazeia tokenize --special -m GGUF -f TEXT` must equal
Tokenizer.from_file(TOKENIZER_DIR/tokenizer.json).encode(text).ids (specials such as
<|endoftext|> in the text included). Exit status 1 on any difference (first one printed).
"""
import argparse
import subprocess
import sys
from pathlib import Path

from tokenizers import Tokenizer


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("gguf")
    ap.add_argument("tokenizer_dir")
    ap.add_argument("texts", nargs="+")
    ap.add_argument("--kazeia", default=str(Path(__file__).resolve().parent.parent / "build" / "kazeia"))
    a = ap.parse_args(argv)
    tok = Tokenizer.from_file(str(Path(a.tokenizer_dir) / "tokenizer.json"))
    bad = 0
    for t in a.texts:
        ref = tok.encode(Path(t).read_text(encoding="utf-8"), add_special_tokens=False).ids
        out = subprocess.run([a.kazeia, "tokenize", "--special", "-m", a.gguf, "-f", t], check=True,
                             capture_output=True, text=True).stdout
        got = [int(x) for x in out.split()]
        if got == ref:
            print(f"{t}: {len(ref)} tokens identical")
            continue
        bad += 1
        i = next((i for i, (x, y) in enumerate(zip(got, ref)) if x != y), min(len(got), len(ref)))
        print(f"{t}: MISMATCH at token {i} (engine {len(got)} tokens, HF {len(ref)}): "
              f"engine {got[max(0, i - 3):i + 5]} HF {ref[max(0, i - 3):i + 5]} "
              f"HF text {tok.decode(ref[max(0, i - 3):i + 5])!r}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
