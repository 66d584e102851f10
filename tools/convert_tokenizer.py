#!/usr/bin/env python3
"""HF tokenizer.json (byte-level BPE) -> GGUF tokenizer.ggml.* keys, the way llama.cpp's
convert_hf_to_gguf.py writes them for Qwen2/Qwen3/Qwen3.5 (get_vocab_base + SpecialVocab).

Module use (tools/convert_hf.py):
    from convert_tokenizer import write_tokenizer_kvs
    write_tokenizer_kvs(writer, tokenizer_dir, pre="qwen2", pad_to=vocab_size)

CLI (vocab-only GGUF, no tensors):
    python3 tools/convert_tokenizer.py TOKENIZER_DIR OUT.gguf [--pre qwen2|qwen35] [--pad-to N] [--arch qwen3]

What is written (as llama.cpp does):
  tokens        every id 0..N-1: the vocab entry, added tokens at their ids, and "[PAD<i>]" for
                ids without a token (N = max(pad_to, highest id + 1))
  token_type    NORMAL(1) for vocab tokens; for added tokens CONTROL(3) when marked special or
                when they look special ("<|...|>", "<｜...｜>", "<pad>", "<mask>", "<2mass>",
                "[@BOS@]", "<unused...>"), else USER_DEFINED(4); UNUSED(5) for padding
  merges        "left right" strings (gguf.SpecialVocab, which also handles list-form merges)
  special ids   from tokenizer_config.json (eos = <|im_end|>, padding = <|endoftext|> for Qwen),
                then config.json *_token_id when the directory has one; add_bos_token; and
                tokenizer.chat_template
"""
import argparse
import json
import sys
from pathlib import Path

import gguf

PRE_CHOICES = ("qwen2", "qwen35")
# the Split regex of tokenizer.json each pre-tokenizer name stands for (src/text/tokenizer.c)
PRE_REGEX = {
    "qwen2": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "qwen35": (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
               r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
}


def _split_regex(tj):
    """the Split pre-tokenizer pattern of a tokenizer.json, or None"""
    pt = tj.get("pre_tokenizer") or {}
    for p in pt.get("pretokenizers", [pt]):
        if p.get("type") == "Split":
            return (p.get("pattern") or {}).get("Regex")
    return None


def check_pre(tokenizer_dir, pre):
    """Refuse a --pre that contradicts the tokenizer's own regex (silent mis-tokenisation
    otherwise); an unknown regex only warns."""
    with open(Path(tokenizer_dir) / "tokenizer.json", encoding="utf-8") as f:
        tj = json.load(f)
    rx = _split_regex(tj)
    known = {v: k for k, v in PRE_REGEX.items()}
    if rx in known and known[rx] != pre:
        raise ValueError(f"{tokenizer_dir}: tokenizer.json's Split regex is the {known[rx]!r} one, "
                         f"not {pre!r} (use --pre {known[rx]})")
    if rx not in known:
        print(f"convert_tokenizer: warning: unrecognised pre-tokenizer regex {rx!r}; "
              f"writing pre={pre!r}", file=sys.stderr)
    norm = (tj.get("normalizer") or {}).get("type")
    if norm not in ("NFC", None):
        print(f"convert_tokenizer: warning: normalizer {norm!r}; the engine applies NFC", file=sys.stderr)


def _looks_special(text: str) -> bool:
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<\uff5c") and text.endswith("\uff5c>"))
            or (text.startswith("<unused") and text.endswith(">")))


def load_vocab(tokenizer_dir, pad_to=None):
    """Returns (tokens, toktypes) for ids 0..N-1."""
    tokenizer_dir = Path(tokenizer_dir)
    with open(tokenizer_dir / "tokenizer.json", encoding="utf-8") as f:
        tj = json.load(f)
    model = tj.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError(f"{tokenizer_dir}/tokenizer.json: model type {model.get('type')!r}, only BPE is supported")
    vocab = dict(model["vocab"])
    added = {}
    for at in tj.get("added_tokens", []):
        added[at["id"]] = at
    by_id = {i: t for t, i in vocab.items()}
    for i, at in added.items():
        by_id[i] = at["content"]
    n = max(by_id) + 1
    if pad_to is not None:
        if pad_to < n:
            raise ValueError(f"--pad-to {pad_to} is smaller than the vocab ({n} ids)")
        n = pad_to
    tokens, types = [], []
    for i in range(n):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
        elif i in added:
            text = added[i]["content"]
            if added[i].get("special") or _looks_special(text):
                types.append(gguf.TokenType.CONTROL)
            else:
                # llama.cpp turns the SentencePiece space mark into a real space here
                text = text.replace("\u2581", " ")
                types.append(gguf.TokenType.USER_DEFINED)
            tokens.append(text)
        else:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
    return tokens, types


def write_tokenizer_kvs(writer, tokenizer_dir, pre, pad_to=None):
    """Add the tokenizer.ggml.* keys (and tokenizer.chat_template) to a gguf.GGUFWriter."""
    if pre not in PRE_CHOICES:
        raise ValueError(f"pre {pre!r} not supported (choose from {', '.join(PRE_CHOICES)})")
    check_pre(tokenizer_dir, pre)
    tokens, types = load_vocab(tokenizer_dir, pad_to)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(Path(tokenizer_dir), load_merges=True, n_vocab=len(tokens))
    special.add_to_gguf(writer, quiet=True)
    return len(tokens)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("tokenizer_dir")
    ap.add_argument("out")
    ap.add_argument("--pre", default="qwen2", choices=PRE_CHOICES)
    ap.add_argument("--pad-to", type=int, default=None)
    ap.add_argument("--arch", default="qwen3")
    a = ap.parse_args(argv)
    try:
        check_pre(a.tokenizer_dir, a.pre)
        load_vocab(a.tokenizer_dir, a.pad_to)  # fail before creating the output file
    except (OSError, ValueError, KeyError) as e:
        print(f"convert_tokenizer: {e}", file=sys.stderr)
        return 1
    w = gguf.GGUFWriter(a.out, a.arch)
    n = write_tokenizer_kvs(w, a.tokenizer_dir, a.pre, a.pad_to)
    w.add_name(f"{Path(a.tokenizer_dir).name} tokenizer")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: {n} tokens, pre={a.pre}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
