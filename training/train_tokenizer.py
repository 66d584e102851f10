#!/usr/bin/env python3
"""Train the default model's byte-level BPE tokenizer and tokenise the corpus.

    python3 training/train_tokenizer.py [--state /work/train-state] [--vocab 4096]

Same pipeline as Qwen3.5's tokenizer.json (NFC normaliser, its Split regex, byte-level
pre-tokenizer and decoder, BPE without unk/byte-fallback), trained on STATE/corpus/train.txt
only. ChatML/think specials are added tokens. Writes STATE/tokenizer/{tokenizer.json,
tokenizer_config.json} and STATE/tokens/{train,heldout,heldout_en,heldout_fr}.u16 (uint16
ids, documents joined by <|endoftext|>; about 1 train document in 5 as a ChatML turn, see
chat_format).
"""
import argparse
import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

# Qwen3.5's pre-tokenizer regex (shared/data/qwen35-tokenizer/tokenizer.json; "qwen35" in
# tools/convert_tokenizer.py): the engine recognises it by this exact string.
QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
EOT = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}")


def build(vocab):
    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN35_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab, min_frequency=2, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    return tok, trainer


def docs_of(path):
    return Path(path).read_text(encoding="utf-8").rstrip("\n").split(f"\n{EOT}\n")


def chat_format(doc):
    """Some training documents become one ChatML turn, as `kazeia run` renders a prompt
    (src/text/chat.c: qwen35, empty think block): the user says the first sentence of the
    chunk, the assistant continues with the rest of that paragraph and up to 3 more, ends its
    turn, and the chunk's remaining paragraphs follow as plain text. Without this a base model
    never sees the template the engine's chat command feeds it."""
    paras = doc.split("\n\n")
    first = paras[0]
    cut = re.search(r"[.!?;:](\s)", first)
    if cut is None or cut.start() > 200 or len(paras) < 2:
        return None
    user, rest = first[:cut.start() + 1], first[cut.end():]
    k = 1 + int(hashlib.sha1(doc.encode()).digest()[1]) % 4
    answer = "\n\n".join(([rest] if rest else []) + paras[1:k])
    tail = "\n\n".join(paras[k:])
    s = (f"<|im_start|>user\n{user.strip()}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
         f"{answer.strip()}<|im_end|>\n")
    return s + (f"{EOT}{tail}" if tail else "")


def encode_docs(tok, docs, chat_one_in=0):
    eot = tok.token_to_id(EOT)
    out = []
    if chat_one_in:
        conv = []
        for d in docs:
            c = chat_format(d) if int(hashlib.sha1(d.encode()).digest()[0]) % chat_one_in == 0 else None
            conv.append(c if c is not None else d)
        docs = conv
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        out.extend(enc.ids)
        out.append(eot)
    a = np.asarray(out, dtype=np.uint16)
    assert int(a.max()) < 65536
    return a


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--state", default="/work/train-state")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--chat-one-in", type=int, default=5,
                    help="about 1 train document in N becomes a ChatML turn (0: none)")
    a = ap.parse_args(argv)
    state = Path(a.state)
    corpus = state / "corpus"
    train_docs = docs_of(corpus / "train.txt")
    tok, trainer = build(a.vocab)
    tok.train_from_iterator(train_docs, trainer=trainer, length=len(train_docs))
    tdir = state / "tokenizer"
    tdir.mkdir(parents=True, exist_ok=True)
    tok.save(str(tdir / "tokenizer.json"))
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "model_max_length": 2048,
           "bos_token": None, "eos_token": EOT, "pad_token": EOT, "unk_token": None,
           "add_bos_token": False, "add_prefix_space": False, "errors": "replace",
           "clean_up_tokenization_spaces": False, "split_special_tokens": False,
           "chat_template": CHAT_TEMPLATE}
    (tdir / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1, ensure_ascii=False) + "\n")
    tokdir = state / "tokens"
    tokdir.mkdir(parents=True, exist_ok=True)
    for name in ("train", "heldout", "heldout_en", "heldout_fr"):
        arr = encode_docs(tok, docs_of(corpus / f"{name}.txt"), a.chat_one_in if name == "train" else 0)
        arr.tofile(tokdir / f"{name}.u16.tmp")
        (tokdir / f"{name}.u16.tmp").replace(tokdir / f"{name}.u16")
        nbytes = (corpus / f"{name}.txt").stat().st_size
        print(f"{name}: {arr.size} tokens, {nbytes / arr.size:.2f} bytes/token")


if __name__ == "__main__":
    main()
