"""Tokenizer conformance: `kazeia tokenize` vs HF `tokenizers` on the real Qwen3 tokenizer.

The Qwen3 tokenizer.json is converted with tools/convert_tokenizer.py (the same keys
llama.cpp writes); > 1 MB of mixed text (generated deterministically below) is encoded by
both, ids must be identical on every document, and decoding must give back the NFC text.
A second run swaps in the Qwen3.5 pre-tokenizer regex (tokenizer.ggml.pre = "qwen35") on the
same vocab; a third uses the real Qwen3.5 tokenizer (../shared/data/qwen35-tokenizer, 248,077
tokens: its own vocab, merges and added tokens). Code-point sweeps cover every Unicode code point for the regex classes and NFC.
"""
import functools
import json
import os
import random
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from tokenizers import Tokenizer, normalizers

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / os.environ.get("KZ_BUILD", "build")
KAZEIA = BUILD / "kazeia"
TOKDIR = ROOT.parent / "shared" / "data" / "qwen3-tokenizer"
TOKDIR35 = ROOT.parent / "shared" / "data" / "qwen35-tokenizer"  # the real Qwen3.5 one (SOURCE.md)
sys.path.insert(0, str(ROOT / "tools"))
import convert_tokenizer  # noqa: E402

QWEN35_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|"
                r" ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
NFC = normalizers.NFC()

# ------------------------------------------------------------------ text generation

FR_WORDS = ("été déjà où garçon naïve cœur Noël français élève château forêt hôpital piqûre Ça "
            "à être très après l'été d'accord aujourd'hui Œuvre ambiguë maïs île coût Ève "
            "Égalité fraternité liberté résumé crème brûlée fenêtre où qu'il s'est n'était "
            "le la les des une un et ou mais donc or ni car pour avec sans sous sur").split()
EN_WORDS = ("the of and to in is was he for it with as his on be at by I that this had not are "
            "but from or have an they which one you were her all she there would their we him "
            "been has when who will more no if out so said what up its about into than them "
            "can only other new some could time these two may then do first any my now such "
            "like our over man me even most made after also did many before must through").split()
CONTRACTIONS = ("I'm you're we've he'll she'd it's don't DON'T YOU'RE I'M We'Ve 'tis "
                "rock'n'roll o'clock y'all ma'am it'ſ THEY'LL she'D You'Re can't won't "
                "'S 'T 'RE 'VE 'M 'LL 'D ''quoted'' '' ' 's's it'ſelf 'ſup 'Sup 'LLama 'Dx're 'ſ").split()
CODE = [
    'int main(int argc, char **argv) {\n\tfor (int i = 0; i < argc; i++) {\n\t\tprintf("%s\\n", argv[i]);\n\t}\n\treturn 0;\n}\n',
    "def f(x, y=3):\n    '''doc'''\n    if x >= y and not (x % 2):\n        return [i**2 for i in range(x)]\n    return {\"k\": x, 'v': y}\n\n",
    '{"name": "kazeia", "version": [0, 1, 0], "nested": {"a": null, "b": true, "c": -1.5e-7}}\r\n',
    '<html>\r\n  <body class="x">\r\n    <p>Hello &amp; <b>bye</b></p>\r\n  </body>\r\n</html>\r\n',
    "    x = a->b.c[3] << 2 | ~d ^ 0xFF; /* comment */ // line\n#include <stdio.h>\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%an%';\n",
    "fn main() { let v: Vec<u8> = (0..10).map(|x| x * 2).collect(); println!(\"{:?}\", v); }\n",
    "   \t  mixed\t\tindent  \n\n\n\t\n  trailing   \n",
]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇫🇷", "🇯🇵🇺🇸", "❤️", "1️⃣", "🧑🏿‍🚀", "🤷‍♀️", "✅", "🦙", "😶‍🌫️",
         "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "👩🏻‍❤️‍💋‍👨🏼", "☕", "🚀", "⌚", "©️", "🫠"]
CJK = ["我想在apple工作1314151天～", "今天天气很好，我们去公园散步吧。", "東京は日本の首都です。",
       "ひらがなとカタカナ、ｶﾞｷﾞｸﾞ半角。", "한국어 문장입니다. 안녕하세요!", "中文，標點符號：「引號」『雙引號』",
       "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af", "ㄱㄴㄷ ㅏㅑㅓ", "𠀀𠀁𪚥 𝌆"]
ARABIC = ["بِسْمِ اللَّهِ الرَّحْمَٰنِ الرَّحِيمِ", "مرحبا بالعالم ١٢٣٤٥٦٧٨٩٠", "اللُّغَةُ الْعَرَبِيَّةُ",
          "\u0644\u0651\u064e \u0644\u064e\u0651", "שָׁלוֹם עוֹלָם", "ܫܠܡܐ"]
HINDI = ["हिन्दी भाषा बहुत सुंदर है।", "क़ ख़ ग़ ज़ ड़ ढ़ फ़ य़", "\u0958\u0959\u095a \u0915\u093c",
         "संस्कृतम् ॐ १२३४", "தமிழ் மொழி", "ভাষা বাংলা", "ಕನ್ನಡ", "മലയാളം", "ไทย ภาษา", "ພາສາລາວ",
         "\u0b47\u0b3e \u0b4b \u0dd9\u0dcf \u1025\u102e"]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
            "</tool_call>", "<|fim_prefix|>", "<|fim_pad|>", "<|vision_start|>", "<tool_response>",
            "<|im_sta", "<think", "<|im_end|", "<<|im_end|>>", "<|im_start|><|im_end|>", "<|box_end|>"]
WS = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ", "  \n  ",
      "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085", "\u000b", "\u000c", "\u200b", "\u2009",
      "\u202f", " \t \n", "\ufeff"]
# blocks to draw random code points from: (first, last)
BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x250, 0x2FF), (0x300, 0x36F), (0x370, 0x3FF),
          (0x400, 0x52F), (0x530, 0x58F), (0x590, 0x5FF), (0x600, 0x6FF), (0x700, 0x7FF),
          (0x800, 0x8FF), (0x900, 0xDFF), (0xE00, 0xEFF), (0xF00, 0xFFF), (0x1000, 0x10FF),
          (0x1100, 0x11FF), (0x1200, 0x139F), (0x13A0, 0x16FF), (0x1700, 0x1CFF),
          (0x1D00, 0x1DFF), (0x1E00, 0x1FFF), (0x2000, 0x206F), (0x2070, 0x20FF),
          (0x2100, 0x27FF), (0x2800, 0x2BFF), (0x2C00, 0x2E7F), (0x2E80, 0x31FF),
          (0x3200, 0x4DBF), (0x4E00, 0x9FFF), (0xA000, 0xABFF), (0xAC00, 0xD7FF),
          (0xE000, 0xF8FF), (0xF900, 0xFB4F), (0xFB50, 0xFDFF), (0xFE00, 0xFFFF),
          (0x10000, 0x1047F), (0x10480, 0x10FFF), (0x11000, 0x11FFF), (0x12000, 0x1342F),
          (0x16800, 0x16FFF), (0x16D40, 0x16D7F), (0x1B000, 0x1BCAF), (0x1D000, 0x1D24F),
          (0x1D400, 0x1D7FF), (0x1E000, 0x1EFFF), (0x1F000, 0x1FAFF), (0x20000, 0x2A6DF),
          (0x2F800, 0x2FA1F), (0x30000, 0x3134F), (0xE0000, 0xE01EF), (0xF0000, 0xF00FF),
          (0x10FF00, 0x10FFFF)]


def rand_cp(r):
    a, b = r.choice(BLOCKS)
    while True:
        c = r.randint(a, b)
        if not 0xD800 <= c <= 0xDFFF:
            return chr(c)


@functools.lru_cache(maxsize=None)
def gen_docs():
    """Deterministic documents: list of (name, text)."""
    r = random.Random(20240531)
    docs = []

    def words(pool, n, sep=" "):
        out = []
        for i in range(n):
            w = r.choice(pool)
            if r.random() < 0.1:
                w = w.capitalize()
            if r.random() < 0.08:
                w += r.choice([",", ".", ";", "!", "?", " :", "...", " «", "»", "’", "—"])
            out.append(w)
        return sep.join(out)

    fr = "\n".join(words(FR_WORDS, r.randint(5, 40)) for _ in range(1500))
    docs.append(("french-nfc", unicodedata.normalize("NFC", fr)))
    docs.append(("french-nfd", unicodedata.normalize("NFD", fr)))
    en = "\n\n".join(" ".join(words(EN_WORDS, r.randint(3, 12)) + " " + r.choice(CONTRACTIONS)
                              for _ in range(r.randint(1, 6))) for _ in range(1500))
    docs.append(("english", en))
    docs.append(("code", "".join(r.choice(CODE) for _ in range(700))))
    digits = []
    for _ in range(3000):
        k = r.random()
        if k < 0.3:
            digits.append("".join(r.choice("0123456789") for _ in range(r.randint(1, 60))))
        elif k < 0.5:
            digits.append(f"{r.uniform(-1e6, 1e6):.{r.randint(0, 9)}f}")
        elif k < 0.6:
            digits.append(f"{r.randint(0, 10**9):,}")
        elif k < 0.7:
            digits.append("".join(r.choice("٠١٢٣٤٥٦٧٨٩۰۱۲۳") for _ in range(r.randint(1, 12))))
        elif k < 0.8:
            digits.append("".join(r.choice("０１２３４５６７８９²³¹½¼ⅫⅣ①⑩") for _ in range(r.randint(1, 8))))
        else:
            digits.append(r.choice(["3.3", "3..3", "3...3", "v1.2.3", "0x1F", "1e-9", "+33 6 12 34 56 78", "12:30:45"]))
    docs.append(("digits", r.choice([" ", "\n", ", "]).join(digits)))
    wsdoc = []
    for _ in range(12000):
        wsdoc.append(r.choice(WS) * r.randint(1, 3))
        wsdoc.append(r.choice(EN_WORDS + FR_WORDS + ["!", "(", "x", "1", "é"]))
    docs.append(("whitespace", "".join(wsdoc)))
    docs.append(("whitespace-tail", "word" + "   \t\n\r\n   " * 200 + "  "))
    docs.append(("emoji", "".join(r.choice(EMOJI) + r.choice(["", " ", "\n", "a", "!", "  "]) for _ in range(8000))))
    docs.append(("cjk", "".join(r.choice(CJK) + r.choice(["", " ", "\n", "。"]) for _ in range(3000))))
    docs.append(("arabic-hebrew", " ".join(r.choice(ARABIC) for _ in range(2500))))
    docs.append(("indic", " ".join(r.choice(HINDI) for _ in range(3000))))
    sp = []
    for _ in range(5000):
        sp.append(r.choice(SPECIALS))
        sp.append(r.choice(["", " ", "\n", "user\n", "Hello", "é", "\u0301", "\u0338", "  ", "<", "|"]))
    docs.append(("specials", "".join(sp)))
    rnd = []
    for _ in range(60000):
        rnd.append(rand_cp(r))
        if r.random() < 0.05:
            rnd.append(r.choice(WS))
    docs.append(("random-blocks", "".join(rnd)))
    # combining marks in random order after random bases (canonical reordering + composition)
    marks = [chr(c) for c in range(0x300, 0x370)] + ["\u0591", "\u05b0", "\u05bc", "\u064b", "\u0651",
                                                      "\u093c", "\u094d", "\u0e38", "\u0f71", "\u1dc0",
                                                      "\u20d0", "\u302a", "\u3099", "\u309a", "\U0001d165",
                                                      "\u0d3b", "\u0c3c", "\U0001133b", "\U000113b8"]
    comb = []
    for _ in range(30000):
        comb.append(r.choice("aeiouAEIOUnNcCsSzZyY" + "αωηΑκиеЗ" + "かはカハ" + "\u1100\u1161\u11a8가"))
        comb.extend(r.choice(marks) for _ in range(r.choice([0, 1, 1, 2, 3, 5])))
        if r.random() < 0.2:
            comb.append(" ")
    docs.append(("combining", "".join(comb)))
    mix = []
    pools = [FR_WORDS, EN_WORDS, CONTRACTIONS, EMOJI, CJK, ARABIC, HINDI, SPECIALS, WS, CODE]
    for _ in range(25000):
        p = r.choice(pools)
        mix.append(r.choice(p) if r.random() < 0.9 else rand_cp(r))
        if r.random() < 0.5:
            mix.append(r.choice([" ", "", "\n", "\t"]))
    docs.append(("mix", "".join(mix)))
    docs.append(("empty-ish", " "))
    docs.append(("single-newline", "\n"))
    return tuple(docs)


@functools.lru_cache(maxsize=None)
def codepoint_docs():
    """Every code point (surrogates excepted), in order, in chunks; and each non-CJK assigned
    code point (per this Python's unicodedata) in several regex/NFC contexts."""
    cps = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    docs = []
    step = 1 << 15
    for i in range(0, len(cps), step):
        docs.append((f"all-cps-{i:06x}", "".join(map(chr, cps[i:i + step]))))
    sel = [c for c in cps if unicodedata.category(chr(c)) not in ("Cn", "Co", "Cs")
           and not (0x3400 <= c <= 0x9FFF or 0xAC00 <= c <= 0xD7A3 or 0x17000 <= c <= 0x18D08
                    or 0x20000 <= c <= 0x323AF)]
    # contexts: after a letter+mark, after a space, after a digit, after an apostrophe, before a
    # mark, and in a whitespace run
    ctx = "".join(f"A\u0301{ch}\u0316 x{ch}1{ch}'{ch}\u0300!{ch}\n {ch} \n"
                  for ch in map(chr, sel))
    for i in range(0, len(ctx), 1 << 18):
        docs.append((f"cp-context-{i // (1 << 18)}", ctx[i:i + (1 << 18)]))
    return tuple(docs)


# ------------------------------------------------------------------ helpers

def need_binary():
    assert KAZEIA.is_file(), f"{KAZEIA} not built (set KZ_BUILD to the build dir)"


def kz_run(gguf_path, text_path, *flags):
    cmd = [str(KAZEIA), "tokenize", "-m", str(gguf_path), "-f", str(text_path), *flags]
    p = subprocess.run(cmd, capture_output=True, timeout=600)
    assert p.returncode == 0, f"{' '.join(cmd)} failed: {p.stderr.decode(errors='replace')}"
    return p.stdout


def kz_encode(gguf_path, text_path, *flags):
    line = kz_run(gguf_path, text_path, *flags).decode().strip()
    return [int(x) for x in line.split()] if line else []


def first_mismatch(name, text, ref, got, hf):
    n = min(len(ref), len(got))
    i = next((k for k in range(n) if ref[k] != got[k]), n)
    enc = hf.encode(text, add_special_tokens=False)
    off = enc.offsets[i] if i < len(enc.offsets) else (len(text), len(text))
    lo, hi = max(0, i - 4), i + 5
    return (f"{name}: first mismatch at token {i} (lengths hf={len(ref)} kz={len(got)}), "
            f"text offset {off}: context {text[max(0, off[0] - 20):off[1] + 20]!r}\n"
            f"  hf: {[hf.id_to_token(x) for x in ref[lo:hi]]} {ref[lo:hi]}\n"
            f"  kz: {[hf.id_to_token(x) for x in got[lo:hi]]} {got[lo:hi]}")


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    out = d / "qwen3-vocab.gguf"
    assert convert_tokenizer.main([str(TOKDIR), str(out), "--pre", "qwen2", "--pad-to", "151936"]) == 0
    return out, Tokenizer.from_file(str(TOKDIR / "tokenizer.json"))


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    """Same vocab, Qwen3.5 regex: HF tokenizer.json with the pattern swapped."""
    d = tmp_path_factory.mktemp("tok35")
    tj = json.loads((TOKDIR / "tokenizer.json").read_text(encoding="utf-8"))
    split = tj["pre_tokenizer"]["pretokenizers"][0]
    assert split["type"] == "Split"
    split["pattern"]["Regex"] = QWEN35_REGEX
    (d / "tokenizer.json").write_text(json.dumps(tj, ensure_ascii=False), encoding="utf-8")
    (d / "tokenizer_config.json").write_bytes((TOKDIR / "tokenizer_config.json").read_bytes())
    out = d / "qwen35-vocab.gguf"
    assert convert_tokenizer.main([str(d), str(out), "--pre", "qwen35"]) == 0
    return out, Tokenizer.from_file(str(d / "tokenizer.json"))


@pytest.fixture(scope="module")
def qwen35_real(tmp_path_factory):
    """The real Qwen3.5 tokenizer (248,077 tokens, its own vocab, merges and regex)."""
    d = tmp_path_factory.mktemp("tok35real")
    out = d / "qwen35-real-vocab.gguf"
    assert convert_tokenizer.main([str(TOKDIR35), str(out), "--pre", "qwen35"]) == 0
    hf = Tokenizer.from_file(str(TOKDIR35 / "tokenizer.json"))
    assert hf.get_vocab_size() == 248077
    return out, hf


# Documents are joined with an added token that none contains: added tokens are cut out before
# normalisation and pre-tokenisation, so the ids of the join are the ids of the documents with
# the separator's id between them; one engine call covers all documents.
SEP = "<|video_pad|>"


def check_docs(model, docs, tmp_path, roundtrip=True):
    need_binary()
    gguf_path, hf = model
    sep_id = hf.token_to_id(SEP)
    assert all(SEP not in t for _, t in docs)
    joined = SEP.join(t for _, t in docs)
    p = tmp_path / "docs.txt"
    p.write_bytes(joined.encode("utf-8"))
    got_all = kz_encode(gguf_path, p, "--special")
    parts, cur = [], []
    for x in got_all:
        if x == sep_id:
            parts.append(cur)
            cur = []
        else:
            cur.append(x)
    parts.append(cur)
    assert len(parts) == len(docs), f"separator count: {len(parts)} parts for {len(docs)} docs"
    failures, refs = [], []
    for (name, text), got in zip(docs, parts):
        ref = hf.encode(text, add_special_tokens=False).ids
        refs.append(ref)
        if got != ref:
            failures.append(first_mismatch(name, text, ref, got, hf))
    assert not failures, "\n".join(failures)
    if roundtrip:
        back = kz_run(gguf_path, p, "--special", "--decode")
        want = hf.decode(got_all, skip_special_tokens=False).encode("utf-8")
        if back != want:
            k = next((i for i in range(min(len(back), len(want))) if back[i] != want[i]), None)
            pytest.fail(f"decode(encode(x)) differs from HF decode at byte {k}: "
                        f"{want[k:k + 20]!r} vs {back[k:k + 20]!r}")
        # docs without added tokens: the round trip is exactly NFC(x)
        back_docs = back.split(SEP.encode())
        for (name, text), b in zip(docs, back_docs):
            if "<|" not in text and "<t" not in text and "</" not in text:
                assert b == NFC.normalize_str(text).encode("utf-8"), f"{name}: decode(encode(x)) != NFC(x)"
    return len(joined.encode("utf-8"))


# ------------------------------------------------------------------ tests

def test_mixed_corpus_qwen3(qwen3, tmp_path):
    total = check_docs(qwen3, gen_docs(), tmp_path)
    assert total >= 1_000_000, f"corpus is only {total} bytes"


def test_mixed_corpus_qwen35(qwen35, tmp_path):
    check_docs(qwen35, gen_docs(), tmp_path)


def test_mixed_corpus_qwen35_real(qwen35_real, tmp_path):
    check_docs(qwen35_real, gen_docs(), tmp_path)


def test_every_codepoint_qwen35_real(qwen35_real, tmp_path):
    check_docs(qwen35_real, codepoint_docs(), tmp_path, roundtrip=False)


def test_every_codepoint_qwen3(qwen3, tmp_path):
    check_docs(qwen3, codepoint_docs(), tmp_path, roundtrip=False)


def test_every_codepoint_qwen35(qwen35, tmp_path):
    check_docs(qwen35, codepoint_docs(), tmp_path, roundtrip=False)


def check_pieces_and_nfc(model, docs, tmp_path, nfc=True):
    """Direct checks that ids alone miss (a split between two rare characters usually gives
    the same byte tokens): pre-tokenizer piece boundaries (HF's pre_tokenizer on the raw text)
    and NFC (HF's normalizer) against `kazeia tokenize --pieces / --nfc`."""
    need_binary()
    gguf_path, hf = model
    text = "\n".join(t for _, t in docs)
    raw = text.encode("utf-8")
    p = tmp_path / "pieces.txt"
    p.write_bytes(raw)
    ends, e = [], 0
    for piece, _ in hf.pre_tokenizer.pre_tokenize_str(text):
        e += len(piece)  # ByteLevel-mapped: one char per byte
        ends.append(e)
    got = kz_encode(gguf_path, p, "--pieces")
    if got != ends:
        k = next((i for i in range(min(len(got), len(ends))) if got[i] != ends[i]), min(len(got), len(ends)))
        at = ends[k - 1] if k else 0
        pytest.fail(f"piece {k} differs: hf ends {ends[k:k + 3]} kz {got[k:k + 3]}; text at byte {at}: "
                    f"{raw[at:at + 24].decode('utf-8', 'replace')!r}")
    if nfc:
        want = hf.normalizer.normalize_str(text).encode("utf-8")
        got_nfc = kz_run(gguf_path, p, "--nfc")
        if got_nfc != want:
            k = next((i for i in range(min(len(got_nfc), len(want))) if got_nfc[i] != want[i]), None)
            pytest.fail(f"NFC differs at byte {k}: hf {want[k:k + 12]!r} kz {got_nfc[k:k + 12]!r}")


def test_pieces_and_nfc_every_codepoint_qwen3(qwen3, tmp_path):
    check_pieces_and_nfc(qwen3, codepoint_docs() + gen_docs(), tmp_path)


def test_pieces_every_codepoint_qwen35(qwen35, tmp_path):
    check_pieces_and_nfc(qwen35, codepoint_docs() + gen_docs(), tmp_path, nfc=False)


def test_known_ids(qwen3, tmp_path):
    """Ids fixed independently of HF's encoder: special ids from docs/qwen35.md#tokenizer, "\n" = 198,
    "\n\n" = 271, and the vocab entries of "user" / "Hello"."""
    need_binary()
    vocab = json.loads((TOKDIR / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    p = tmp_path / "t.txt"
    p.write_text("<|im_start|>user\nHello<|im_end|>\n<think>\n\n</think>\n\n", encoding="utf-8")
    want = [151644, vocab["user"], 198, vocab["Hello"], 151645, 198, 151667, 271, 151668, 271]
    assert kz_encode(qwen3[0], p, "--special") == want


def test_without_special_control_tokens_are_text(qwen3, tmp_path):
    """Without --special, CONTROL tokens are plain text but USER_DEFINED ones (<think>) are
    still matched (llama.cpp's rule)."""
    need_binary()
    p = tmp_path / "t.txt"
    p.write_text("<|im_start|>hi<think>", encoding="utf-8")
    cmd = [str(KAZEIA), "tokenize", "-m", str(qwen3[0]), "-f", str(p)]
    got = [int(x) for x in subprocess.run(cmd, capture_output=True, check=True).stdout.split()]
    assert 151644 not in got and got[-1] == 151667
    hf = qwen3[1]
    want = hf.encode("<|", add_special_tokens=False).ids
    assert got[:len(want)] == want


def test_converter_keys(qwen3):
    """The vocab-only GGUF holds what llama.cpp's converter writes (read back with gguf-py)."""
    import gguf
    r = gguf.GGUFReader(str(qwen3[0]))
    f = r.fields

    def scalar(k):
        return f[k].parts[f[k].data[0]].tolist()[0]

    def string(k, i=0):
        return bytes(f[k].parts[f[k].data[i]]).decode("utf-8")

    tj = json.loads((TOKDIR / "tokenizer.json").read_text(encoding="utf-8"))
    cfg = json.loads((TOKDIR / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert string("general.architecture") == "qwen3" and len(r.tensors) == 0
    assert string("tokenizer.ggml.model") == "gpt2" and string("tokenizer.ggml.pre") == "qwen2"
    toks = f["tokenizer.ggml.tokens"]
    assert len(toks.data) == 151936
    assert string("tokenizer.ggml.tokens", 151643) == "<|endoftext|>"
    assert string("tokenizer.ggml.tokens", 151700) == "[PAD151700]"
    assert string("tokenizer.ggml.tokens", tj["model"]["vocab"]["Ġthe"]) == "Ġthe"
    tt = f["tokenizer.ggml.token_type"]
    ty = lambda i: int(tt.parts[tt.data[i]][0])
    assert ty(0) == 1 and ty(151644) == 3 and ty(151659) == 3 and ty(151667) == 4 and ty(151700) == 5
    assert sum(ty(i) == 3 for i in range(151643, 151669)) == 20
    assert sum(ty(i) == 4 for i in range(151643, 151669)) == 6
    m = f["tokenizer.ggml.merges"]
    assert len(m.data) == len(tj["model"]["merges"]) and string("tokenizer.ggml.merges", 0) == "Ġ Ġ"
    assert scalar("tokenizer.ggml.eos_token_id") == 151645
    assert scalar("tokenizer.ggml.padding_token_id") == 151643
    assert "tokenizer.ggml.bos_token_id" not in f  # no config.json beside the tokenizer
    assert scalar("tokenizer.ggml.add_bos_token") is False
    assert string("tokenizer.chat_template") == cfg["chat_template"]


def test_converter_refuses_wrong_pre(tmp_path):
    out = tmp_path / "x.gguf"
    assert convert_tokenizer.main([str(TOKDIR), str(out), "--pre", "qwen35"]) == 1
    assert not out.exists()
    assert convert_tokenizer.main([str(TOKDIR), str(out), "--pad-to", "1000"]) == 1


def test_cli_errors(tmp_path):
    need_binary()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 16)
    p = subprocess.run([str(KAZEIA), "tokenize", "-m", str(bad), "-p", "x"], capture_output=True)
    assert p.returncode != 0 and b"tokenizer" in p.stderr
    p = subprocess.run([str(KAZEIA), "tokenize", "-p", "x"], capture_output=True)
    assert p.returncode == 2


def test_llamacpp_vocab_file_qwen35(tmp_path):
    """llama.cpp's own tokenizer test for the qwen35 pre-tokenizer (models/ggml-vocab-qwen35.gguf
    with its .inp cases and the ids llama.cpp expects in .out; the vocab is Qwen2's, see
    SOURCE.md), read by our engine as it is. Every NFC case gives llama.cpp's ids. The cases
    that are not NFC (decomposed accents) differ on purpose: llama.cpp does not normalise, the
    tokenizer.json of these models prescribes NFC (HF applies it), so ours equal their NFC form's."""
    need_binary()
    vocab = TOKDIR35 / "ggml-vocab-qwen35.gguf"
    cases = (TOKDIR35 / "ggml-vocab-qwen35.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    want = (TOKDIR35 / "ggml-vocab-qwen35.gguf.out").read_text(encoding="utf-8").split("\n")
    if cases[-1] == "":
        cases.pop()
    assert len(cases) >= 40 and len(want) >= len(cases)

    def enc(text, name):
        p = tmp_path / name
        p.write_bytes(text.encode("utf-8"))
        return kz_encode(vocab, p)

    failures, n_nfc, n_other = [], 0, 0
    for i, text in enumerate(cases):
        got = enc(text, f"case{i}.txt")
        ref = [int(x) for x in want[i].split()]
        nfc = unicodedata.normalize("NFC", text)
        if nfc == text:
            n_nfc += 1
            if got != ref:
                failures.append(f"case {i} {text[:40]!r}: llama.cpp {ref[:12]} kazeia {got[:12]}")
        else:
            n_other += 1
            if got != enc(nfc, f"case{i}-nfc.txt") or got == ref:
                failures.append(f"case {i} {text[:40]!r} (not NFC): kazeia {got[:12]}, llama.cpp {ref[:12]}")
    assert not failures, "\n".join(failures)
    assert n_nfc >= 40 and n_other >= 1, (n_nfc, n_other)
