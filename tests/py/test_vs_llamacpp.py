"""Converter and engine against llama.cpp (llama-cpp-python) on the SAME GGUF files.

1. llama.cpp itself on our converted files vs transformers: validates the converter (names,
   transforms, V-head reorder, metadata) independently of our engine.
2. Our engine vs llama.cpp, per type, same tokens and the same prefill/decode schedule, KV cache
   F32 in both.
3. llama.cpp's tokenizer on our GGUF vs the HF tokenizer and `kazeia tokenize`.
(The 500-token prefill is checked against transformers in test_vs_transformers.py; llama.cpp
gave max rel 3.5e-6 / 1.3e-6 there when measured, so it is not repeated here to save time.)
"""
import numpy as np
import pytest

import kzutil
from kzutil import ARCHS, TYPES, BOUNDS_HF, BOUNDS_LCPP

import llama_cpp  # a missing package must fail the suite, not skip it

F32_BOUND = 1e-4


def _lc_arch(model_path):
    """general.architecture as llama.cpp reads it (fails if llama.cpp cannot load the file)."""
    llm = llama_cpp.Llama(model_path=str(model_path), vocab_only=True, verbose=False)
    try:
        return llm.metadata.get("general.architecture")
    finally:
        llm.close()


def test_llamacpp_supports_qwen35():
    """The installed llama.cpp must know arch qwen35 (merged 2026-02-11) to be a reference."""
    ver = getattr(llama_cpp, "__version__", "?")
    path = kzutil.ensure_gguf("qwen35", "f32")
    assert _lc_arch(path) == "qwen35", f"llama-cpp-python {ver} does not report qwen35"
    toks = kzutil.tokens_short()[:8]
    lg = kzutil.lc_logits(path, toks)  # full load + eval: raises if the arch is unknown
    assert lg.shape == (8, kzutil.N_VOCAB) and np.isfinite(lg).all()
    print(f"\nllama-cpp-python {ver}; {llama_cpp.llama_print_system_info().decode().strip()}")


@pytest.mark.parametrize("typ", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_llamacpp_vs_transformers(arch, typ, report):
    toks = kzutil.tokens_short()
    ref = kzutil.hf_logits(arch, toks)
    lc = kzutil.lc_logits(kzutil.ensure_gguf(arch, typ), toks, prefill=len(toks) - 3)
    rel = kzutil.rel_err(lc, ref)
    t1 = kzutil.top1(lc, ref)
    if typ == "f32":
        report.add("lcpp-vs-hf", arch, typ, f"prefill {len(toks) - 3} + 3 dec", rel.max(), rel.mean(), t1,
                   len(toks), F32_BOUND)
        assert rel.max() <= F32_BOUND, f"max rel {rel.max():.3e} at {rel.argmax()}"
        assert np.array_equal(lc.argmax(1), ref.argmax(1))
    else:
        mx, mean, top = BOUNDS_HF[arch][typ]
        report.add("lcpp-vs-hf", arch, typ, f"prefill {len(toks) - 3} + 3 dec", rel.max(), rel.mean(), t1,
                   len(toks), mx)
        assert rel.max() <= mx and rel.mean() <= mean and t1 >= top, \
            f"max rel {rel.max():.3e} (<= {mx}), mean {rel.mean():.3e} (<= {mean}), top1 {t1:.3f} (>= {top})"


@pytest.mark.parametrize("typ", TYPES)
@pytest.mark.parametrize("arch", ARCHS)
def test_ours_vs_llamacpp(arch, typ, report):
    toks = kzutil.tokens_short()
    g = kzutil.ensure_gguf(arch, typ)
    ours = kzutil.kz_logits(g, toks, prefill=len(toks) - 3)
    lc = kzutil.lc_logits(g, toks, prefill=len(toks) - 3)
    rel = kzutil.rel_err(ours, lc)
    t1 = kzutil.top1(ours, lc)
    mx, mean, top = BOUNDS_LCPP[arch][typ]
    report.add("ours-vs-lcpp", arch, typ, f"prefill {len(toks) - 3} + 3 dec", rel.max(), rel.mean(), t1,
               len(toks), mx)
    assert rel.max() <= mx and rel.mean() <= mean and t1 >= top, \
        f"max rel {rel.max():.3e} (<= {mx}), mean {rel.mean():.3e} (<= {mean}), top1 {t1:.3f} (>= {top})"
    if typ == "f32":
        assert np.array_equal(ours.argmax(1), lc.argmax(1))


TOK_TEXTS = (kzutil.TEXT_SHORT, kzutil.TEXT_LONG, "  leading spaces\n\n\ttabs 12345 \u2019quotes\u2019 \U0001f999")
CHAT = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"


def _kz_tokenize(model, text, special, tmp_path):
    f = tmp_path / "text.txt"
    f.write_bytes(text.encode())
    cmd = [kzutil.require_kazeia(), "tokenize", "-m", model, "-f", f, "--ids-only"] + (["--special"] if special else [])
    return [int(x) for x in kzutil.run(cmd).stdout.split()]


@pytest.mark.parametrize("arch", ARCHS)
def test_tokenizer_llamacpp_hf_ours(arch, tmp_path):
    """llama.cpp on our GGUF, the HF tokenizer and `kazeia tokenize` give the same ids."""
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(str(kzutil.TOKENIZER_DIR / "tokenizer.json"))
    model = kzutil.ensure_gguf(arch, "q4_0")
    llm = llama_cpp.Llama(model_path=str(model), vocab_only=True, verbose=False)
    try:
        for text in TOK_TEXTS:
            want = hf.encode(text, add_special_tokens=False).ids
            assert llm.tokenize(text.encode(), add_bos=False, special=False) == want
            assert _kz_tokenize(model, text, False, tmp_path) == want
        ids = llm.tokenize(CHAT.encode(), add_bos=False, special=True)
        assert ids == hf.encode(CHAT, add_special_tokens=False).ids
        assert ids[0] == 151644 and 151645 in ids  # <|im_start|>, <|im_end|>
        assert _kz_tokenize(model, CHAT, True, tmp_path) == ids
        assert llm.token_eos() == 151645
    finally:
        llm.close()
