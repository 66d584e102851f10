"""Multi-turn chat rendering (src/text/chat_template.c) byte-identical to transformers'
apply_chat_template with the models' real Jinja templates: Qwen3.5 (../shared/data/
qwen35-tokenizer, the official chat_template.jinja) and Qwen3 (../shared/data/qwen3-tokenizer).
Histories with and without a system message, earlier assistant turns with <think> content (which
the templates drop or keep depending on the turn), thinking on / off / unspecified, with and
without the generation prompt, whitespace the Qwen3.5 template trims (Unicode spaces too)."""
import ctypes
import itertools
import os
import random
from pathlib import Path

import pytest
from transformers import AutoTokenizer

REPO = Path(__file__).resolve().parents[2]
BUILD = os.environ.get("KZ_BUILD", "build")
DATA = REPO.parent / "shared" / "data"
ROLE = {"system": 0, "user": 1, "assistant": 2}


@pytest.fixture(scope="module")
def lib():
    path = REPO / BUILD / "libkazeia_dev.so"
    assert path.exists(), f"{path} missing: run make dev"
    lib = ctypes.CDLL(str(path))
    f = lib.kz_chat_template_dev
    f.restype = ctypes.c_long
    f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_char_p),
                  ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
    return lib


@pytest.fixture(scope="module", params=["qwen35", "qwen3"])
def arch_tok(request):
    d = DATA / ("qwen35-tokenizer" if request.param == "qwen35" else "qwen3-tokenizer")
    return request.param, AutoTokenizer.from_pretrained(str(d))


def ours(lib, arch, msgs, add_gen, think):
    n = len(msgs)
    roles = (ctypes.c_int * n)(*[ROLE[m["role"]] for m in msgs])
    texts = (ctypes.c_char_p * n)(*[m["content"].encode() for m in msgs])
    cap = 1 << 16
    buf = ctypes.create_string_buffer(cap)
    r = lib.kz_chat_template_dev(1 if arch == "qwen35" else 0, n, roles, texts, int(add_gen),
                                 -1 if think is None else int(think), buf, cap)
    if r < 0:
        raise ValueError(buf.value.decode())
    assert r < cap
    return buf.raw[:r].decode()


def theirs(tok, msgs, add_gen, think):
    kw = {} if think is None else {"enable_thinking": think}
    return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=add_gen, **kw)


ANSWERS = [
    "Paris.",
    "<think>\nThe capital... France.\n</think>\n\nParis is the capital.",
    "reasoning without an opening tag\n</think>\n\n  The answer, after spaces.",
    "<think>\n\n</think>\n\nAn empty think block first.",
    "<think>a</think>b</think>two closings",
    "\n\nleading newlines and trailing  \n",
    "no think at all, with <|im_end|> typed inside",
    "<think>\nunclosed reasoning",
]
USERS = ["Bonjour !", "  spaced out\t\n", "<tool_response>x</tool_response>", "東京 café\u00a0", "\u3000ideo\u2028",
         "two\nlines", "Typed <think> tags </think> by a user"]


def histories(seed, count):
    rng = random.Random(seed)
    for _ in range(count):
        msgs = []
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(["Be terse.", "  You are helpful.\n", "x\u2003"])})
        turns = rng.randint(1, 5)
        for t in range(turns):
            msgs.append({"role": "user", "content": rng.choice(USERS[:2] + USERS[3:]) if t == turns - 1
                         else rng.choice(USERS)})
            if t < turns - 1 or rng.random() < 0.3:
                msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
        yield msgs


def test_multi_turn_byte_identical(lib, arch_tok):
    arch, tok = arch_tok
    checked = 0
    for msgs in histories(1234, 60):
        for add_gen, think in itertools.product([True, False], [None, True, False]):
            want = theirs(tok, msgs, add_gen, think)
            got = ours(lib, arch, msgs, add_gen, think)
            assert got == want, f"{arch} add_gen={add_gen} think={think}\n{msgs}\nours  {got!r}\ntheirs{want!r}"
            checked += 1
    assert checked == 360


def test_last_assistant_turn_keeps_reasoning(lib, arch_tok):
    """the turn after the last query keeps its <think> block; earlier ones lose it"""
    arch, tok = arch_tok
    msgs = [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "<think>\nr1\n</think>\n\na1"},
            {"role": "user", "content": "q2"}, {"role": "assistant", "content": "<think>\nr2\n</think>\n\na2"}]
    got = ours(lib, arch, msgs, False, None)
    assert got == theirs(tok, msgs, False, None)
    assert "r1" not in got and "r2" in got and "a1" in got


def test_refusals_match(lib, arch_tok):
    """qwen35's template refuses a late system message and a history without a user query"""
    arch, tok = arch_tok
    bad = [[{"role": "user", "content": "a"}, {"role": "system", "content": "late"}],
           [{"role": "system", "content": "s"}, {"role": "user", "content": "<tool_response>x</tool_response>"}]]
    for msgs in bad:
        try:
            want = theirs(tok, msgs, True, None)
        except Exception:
            want = None
        if want is None:
            with pytest.raises(ValueError):
                ours(lib, arch, msgs, True, None)
        else:
            assert ours(lib, arch, msgs, True, None) == want
