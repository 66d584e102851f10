"""`kazeia chat --guard` end to end, piped stdin, tiny random models from $KZ_BUILD/kz-mkmodel.

A random guard's verdict is whatever it is (usually malformed -> the documented Controversial
fallback), so each turn checks that the flow agrees with the verdicts the CLI printed under the
policy and action given: a blocking prompt verdict -> the thinker never runs and the message is
not added; a blocking answer verdict -> the reply and its prompt leave the conversation; flag
mode -> flags printed, the turn kept. Branches a random guard cannot reach deterministically are
forced through the real code by editing the random weights (the verdict is still computed by the
guard's forward pass and parsed by the real parser): a guard whose embeddings make 'U' follow
'Safety: ' (Unsafe with p ~ 1, so loose still blocks); a thinker that always writes '~' and a
guard that says Unsafe only when a '~' is in its context (so the prompt passes under loose and the
answer is stopped mid-stream); a guard context too small for the answer (a guard error fails
closed mid-stream). Messages are counted with /stats after every turn.
"""
import re
import shutil
import subprocess

import numpy as np
import pytest

from test_cli import KAZEIA, MKMODEL, need

GUARD = re.compile(r"^\[guard: (\d+) checks?, (\d+) tok evaluated, (\d+) reused, ([\d.]+) ms \| "
                   r"prompt: (.*?) \| answer: (.*)\]$", re.M)
STATS = re.compile(r"^\[(\d+) messages, ", re.M)
LABEL = re.compile(r"^(Safe|Controversial|Unsafe) \(p ([\d.]+)\)")
N_PREDICT = 10


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("chat_guard")
    out = {}
    for name, preset in (("thinker", "qwen35-tiny"), ("guard", "qwen3-tiny")):
        p = d / f"{name}.gguf"
        r = subprocess.run([str(need(MKMODEL)), "--preset", preset, "--type", "f32", "-q", "-o", str(p)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        out[name] = p
    # The byte vocabulary's ' ' (GPT-2 byte map: U+0120) embedded as 100 * e0 and 'U' with e0 = 1000:
    # after "Safety: " the final hidden state points along e0 and the tied head gives 'U' p ~ 1.
    import gguf
    u = d / "guard-unsafe.gguf"
    shutil.copyfile(out["guard"], u)
    rd = gguf.GGUFReader(str(u), "r+")
    f = rd.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
    emb = next(t for t in rd.tensors if t.name == "token_embd.weight").data
    assert emb.dtype == np.float32 and emb.shape[0] == len(toks)
    sp, uu = toks.index("\u0120"), toks.index("U")
    emb[sp, :] = 0
    emb[sp, 0] = 100.0
    emb[uu, 0] = 1000.0
    del rd, emb
    out["unsafe"] = u
    out["tilde_thinker"] = d / "tilde-thinker.gguf"
    out["tilde_guard"] = d / "tilde-guard.gguf"
    tilde_thinker(out["thinker"], out["tilde_thinker"])
    tilde_guard(out["guard"], out["tilde_guard"])
    return out


def edit(src, dst):
    import gguf
    shutil.copyfile(src, dst)
    rd = gguf.GGUFReader(str(dst), "r+")
    f = rd.fields["tokenizer.ggml.tokens"]
    toks = [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
    T = {t.name: t.data for t in rd.tensors}
    # residual dimension 0 is written by nothing but the embeddings (and the channel below)
    for n, a in T.items():
        if n.endswith(("attn_output.weight", "ssm_out.weight", "ffn_down.weight")):
            a[0, :] = 0
    return rd, toks, T


def tilde_thinker(src, dst):
    """Every position's residual points along e0, '~' the most: the tied head always picks '~'."""
    rd, toks, T = edit(src, dst)
    E = T["token_embd.weight"]
    E[:, 0] = 50.0
    E[toks.index("~"), 0] = 1000.0


def tilde_guard(src, dst):
    """Layer 0 attends uniformly (q = 0) and its value / output weights carry a '~' anywhere
    before into residual dim 0 (about +1600 x 256 / n_tokens per '~'); without one, the last
    token ' ' leaves -60 there. The tied head then puts 'U' (e0 = 1000) first only after a '~'."""
    rd, toks, T = edit(src, dst)
    E = T["token_embd.weight"]
    E[:, 0:2] = 0
    E[toks.index("~"), 1] = 1000.0
    E[toks.index("\u0120"), 0] = -60.0
    E[toks.index("U"), 0] = 1000.0
    T["blk.0.attn_q.weight"][:] = 0
    T["blk.0.attn_k.weight"][:, 1] = 0
    T["blk.0.attn_v.weight"][:, 0] = 0
    T["blk.0.attn_v.weight"][:, 1] = 100.0
    T["blk.0.attn_output.weight"][0, :] = 1.0


def chat(models, guard, lines, *flags, thinker=None):
    stdin = "".join(f"{l}\n/stats\n" for l in lines)
    r = subprocess.run([str(need(KAZEIA)), "chat", "-m", str(thinker or models["thinker"]), "--guard", str(guard),
                        "-n", str(N_PREDICT), "-t", "2", "--think", "off", "--seed", "7", *map(str, flags)],
                       input=stdin.encode(), capture_output=True, timeout=600)
    return r.returncode, r.stdout.decode("utf-8", "replace"), r.stderr.decode("utf-8", "replace")


def blocks(verdict, policy, action):
    """What the CLI must have done for a printed verdict, independently of the engine."""
    if verdict == "error":
        return True, True  # a guard error fails closed whatever the action
    m = LABEL.match(verdict)
    assert m, verdict
    unsafe = m.group(1) == "Unsafe" or (m.group(1) == "Controversial" and policy == "strict")
    return unsafe and action == "block", unsafe


def turns(stderr):
    """stderr split at the /stats lines: one chunk per user turn, and the message count after it."""
    out, start = [], 0
    for m in STATS.finditer(stderr):
        out.append((stderr[start:m.start()], int(m.group(1))))
        start = m.end()
    return out


def check_flow(stderr, policy, action, n_turns):
    ts = turns(stderr)
    assert len(ts) == n_turns, stderr
    n_msgs, seen = 0, set()
    for chunk, after in ts:
        g = GUARD.findall(chunk)
        assert len(g) == 1, chunk
        checks, n_eval, n_reused, ms, v_prompt, v_answer = g[0]
        assert int(checks) >= 1 and int(n_eval) > 0 and float(ms) > 0, chunk
        flags = re.findall(r"^\[guard flag: (prompt|answer) ", chunk, re.M)
        p_block, p_unsafe = blocks(v_prompt, policy, action)
        assert ("[prompt blocked: " in chunk) == p_block, chunk
        if p_block:
            seen.add("prompt blocked")
            assert v_answer == "-" and "[prefill " not in chunk and after == n_msgs, chunk
            assert int(checks) == 1, chunk
            continue
        assert ("prompt" in flags) == p_unsafe, chunk
        assert "[prefill " in chunk, chunk  # the thinker ran
        a_block, a_unsafe = blocks(v_answer, policy, action)
        assert ("[answer blocked: " in chunk) == a_block, chunk
        if a_block:
            seen.add("answer blocked")
            assert after == n_msgs, chunk  # the reply and its prompt were removed
            assert re.search(r"\| stopped\]$", chunk, re.M) or int(checks) >= 2, chunk
        else:
            seen.add("answer kept")
            assert ("answer" in flags) == a_unsafe, chunk
            if a_unsafe:
                seen.add("flagged")
            n_msgs += 2
            assert after == n_msgs, chunk
    return seen


@pytest.mark.parametrize("policy", ["strict", "loose"])
@pytest.mark.parametrize("action", ["block", "flag"])
def test_random_guard_flow(models, policy, action):
    rc, out, err = chat(models, models["guard"], ["hello there", "tell me more"], "--guard-policy", policy,
                        "--guard-action", action, "--guard-every", "3")
    assert rc == 0, err
    seen = check_flow(err, policy, action, 2)
    if seen == {"prompt blocked"}:
        assert out.strip() == "", out  # the thinker never ran
    # the guard's state is reused within a turn: a second answer check keeps the template head
    for checks, _, reused, *_ in GUARD.findall(err):
        if int(checks) >= 3:
            assert int(reused) > 0, err


def test_unsafe_guard_blocks_even_loose(models):
    rc, out, err = chat(models, models["unsafe"], ["hello there", "again"], "--guard-policy", "loose")
    assert rc == 0, err
    assert check_flow(err, "loose", "block", 2) == {"prompt blocked"}
    assert "prompt: Unsafe (p 1.00)" in err and out.strip() == ""


def test_unsafe_guard_flag_keeps(models):
    rc, out, err = chat(models, models["unsafe"], ["hello there", "again"], "--guard-action", "flag",
                        "--guard-every", "2")
    assert rc == 0, err
    assert check_flow(err, "strict", "flag", 2) == {"answer kept", "flagged"}
    assert "answer: Unsafe (p 1.00)" in err and out.strip() != ""


def test_unsafe_answer_stopped_midstream(models):
    rc, out, err = chat(models, models["tilde_guard"], ["hello there", "again"], "--guard-policy", "loose",
                        "--guard-every", "2", thinker=models["tilde_thinker"])
    assert rc == 0, err
    assert check_flow(err, "loose", "block", 2) == {"answer blocked"}
    assert "answer: Unsafe (p 1.00)" in err and "prompt: Unsafe" not in err, err
    # stopped at the first check (2 pieces), long before -n
    assert re.findall(r"decode (\d+) tok .*\| stopped\]", err) == ["2", "2"], err
    assert out.split() == ["~~", "~~"], out


def test_unsafe_answer_flagged_kept(models):
    rc, out, err = chat(models, models["tilde_guard"], ["hello there", "again"], "--guard-policy", "loose",
                        "--guard-action", "flag", "--guard-every", "2", thinker=models["tilde_thinker"])
    assert rc == 0, err
    assert check_flow(err, "loose", "flag", 2) == {"answer kept", "flagged"}
    assert out.split() == ["~" * N_PREDICT] * 2, out
    # a check every 2 of the 10 pieces and a final one, plus the prompt's
    assert [int(g[0]) for g in GUARD.findall(err)] == [7, 7], err


def test_guard_error_stops_answer(models):
    """A guard context that holds the prompt check but not the answer's: the first answer check
    fails, which stops the thinker mid-answer and drops the turn (fail closed)."""
    rc, out, err = chat(models, models["guard"], ["hello there"], "--guard-policy", "loose",
                        "--guard-every", "2", "--guard-ctx", "1400")
    assert rc == 0, err
    assert "guard error: " in err and "n_ctx 1400" in err, err
    prefill = re.search(r"decode (\d+) tok .*\| stopped\]", err)
    assert prefill and int(prefill.group(1)) < N_PREDICT, err
    assert check_flow(err, "loose", "block", 1) == {"answer blocked"}


def test_guard_errors(models, tmp_path):
    missing = tmp_path / "nope.gguf"
    rc, out, err = chat(models, missing, ["hi"])
    assert rc != 0 and "cannot load guard model" in err and str(missing) in err, err
    rc, out, err = chat(models, models["thinker"], ["hi"])  # a qwen35 guard: not attention-only
    assert rc != 0 and "attention-only" in err, err
    for flag, val in (("--guard-policy", "lax"), ("--guard-action", "drop"), ("--guard-every", "-1"),
                      ("--guard-ctx", "0")):
        rc, out, err = chat(models, models["guard"], ["hi"], flag, val)
        assert rc == 2 and flag in err, err
