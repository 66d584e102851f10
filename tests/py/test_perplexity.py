"""`kazeia perplexity` and `kazeia imatrix` against independent references, on the tiny random
qwen35 / qwen3 models converted from HF (tools/make_tiny_hf.py + tools/convert_hf.py) and a text of
~6 KB (seeded random sentences from kzutil.TEXT_LONG's words):

- perplexity (llama-perplexity's method: windows of CTX tokens, the second half scored) of the
  F32 GGUF within 0.1 % of the same windows run through transformers (our own torch loop), and
  within 0.5 % of llama.cpp (llama-cpp-python evaluating the same windows; its perplexity
  example is not built); the printed standard error as llama-perplexity's formula gives it;
- KL mode: the base file's layout (llama.cpp's "_logits_" format, tokens = HF tokenizer's ids);
  the model against itself: KLD ~ 0 (only the file's 16-bit log-probabilities), top-1 100 %;
  against its Q8_0 conversion: KLD > 0 and equal to the KLD numpy computes from llama.cpp's
  logits of the two files, PPLs of both printed;
- imatrix: in_sum2 and counts of every weight vs forward pre-hooks on the transformers model over
  the same windows (the converter's column permutation of ssm_out applied).
"""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kzutil  # noqa: E402

CTX = 128
N_CHUNKS = 6  # windows evaluated (the text holds ~10)


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    words = kzutil.TEXT_LONG.split()
    rng = np.random.default_rng(2323)
    out, n = [], 0
    while n < 6000:
        s = " ".join(words[i] for i in rng.integers(0, len(words), int(rng.integers(5, 20)))) + ". "
        out.append(s[0].upper() + s[1:])
        n += len(s.encode())
    p = tmp_path_factory.mktemp("ppl") / "text.txt"
    p.write_text("".join(out), encoding="utf-8")
    return p


def run_kz(*args, timeout=600):
    p = subprocess.run([str(kzutil.require_kazeia()), *map(str, args)], capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"kazeia {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    return p


def final_estimate(out):
    m = re.search(r"Final estimate: PPL = ([0-9.eE+-]+) \+/- ([0-9.eE+-]+)", out)
    assert m, out
    return float(m.group(1)), float(m.group(2))


def windows(text_file):
    ids = kzutil.tokenize(text_file.read_text(encoding="utf-8"))
    assert len(ids) >= 2 * CTX
    n = min(N_CHUNKS, len(ids) // CTX)
    return [ids[i * CTX:(i + 1) * CTX] for i in range(n)]


def ppl_and_err(v):
    v = np.concatenate(v)
    m, m2 = v.mean(), (v * v).mean()
    return float(np.exp(m)), float(np.sqrt((m2 - m * m) / (len(v) - 1)) * np.exp(m))


def hf_model(arch):
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(kzutil.THREADS)
    return AutoModelForCausalLM.from_pretrained(str(kzutil.ensure_hf(arch)), dtype=torch.float32,
                                                attn_implementation="eager").eval()


def lc_window_logits(model, wins):
    import llama_cpp
    llm = kzutil.lc_llama(model, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, logits_all=True,
                          n_threads=kzutil.THREADS, n_threads_batch=kzutil.THREADS,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
    try:
        out = []
        for w in wins:
            llm.reset()
            llm.eval(list(w))
            out.append(np.array(llm.scores[:CTX], dtype=np.float32))
        return out
    finally:
        llm.close()


@pytest.mark.parametrize("arch", kzutil.ARCHS)
def test_perplexity_vs_transformers_and_llamacpp(arch, text_file, report):
    import torch
    model = kzutil.ensure_gguf(arch, "f32")
    wins = windows(text_file)
    p = run_kz("perplexity", "-m", model, "-f", text_file, "-c", CTX, "--chunks", len(wins), "--kv", "f32",
               "-t", kzutil.THREADS)
    ours, ours_err = final_estimate(p.stdout)
    assert re.search(r"^\[1\][0-9.]+,\[2\][0-9.]+,", p.stdout, re.M), p.stdout

    m = hf_model(arch)
    with torch.no_grad():
        hf = [kzutil.window_nlls(m(torch.tensor([w])).logits[0].float().numpy(), w) for w in wins]
    ref, ref_err = ppl_and_err(hf)
    assert abs(ours / ref - 1) < 1e-3, f"{arch}: ours {ours} vs transformers {ref}"
    assert abs(ours_err / ref_err - 1) < 1e-2, f"{arch}: standard error {ours_err} vs {ref_err}"

    lc, _ = ppl_and_err([kzutil.window_nlls(lg, w) for lg, w in zip(lc_window_logits(model, wins), wins)])
    assert abs(ours / lc - 1) < 5e-3, f"{arch}: ours {ours} vs llama.cpp {lc}"
    print(f"\n{arch}: PPL ours {ours:.6g} +/- {ours_err:.4g}, transformers {ref:.6g} ({ours / ref - 1:+.2e}), "
          f"llama.cpp {lc:.6g} ({ours / lc - 1:+.2e})")


def kl_stats(out):
    def num(label):
        m = re.search(re.escape(label) + r"\s*:\s*([-0-9.eE+]+)", out)
        assert m, f"{label} missing in:\n{out}"
        return float(m.group(1))
    return {"kld": num("Mean    KLD"), "top": num("Same top p"), "ppl_q": num("Mean PPL(Q)"),
            "ppl_base": num("Mean PPL(base)"), "dppl": num("Mean PPL(Q)-PPL(base)")}


def clamped_ppl(logits, wins):
    """PPL from log-probabilities floored at (row max - 16), as llama.cpp's base file stores them"""
    first, v = CTX // 2, []
    for lg, w in zip(logits, wins):
        lg = np.asarray(lg[first:CTX - 1], np.float64)
        mx = lg.max(1)
        lse = np.log(np.exp(lg - mx[:, None]).sum(1)) + mx
        t = lg[np.arange(len(lg)), np.asarray(w[first + 1:CTX])]
        v.append(lse - np.maximum(t, np.maximum(lg.min(1), mx - 16)))
    return float(np.exp(np.concatenate(v).mean()))


def exact_kld(base_logits, q_logits):
    """mean over scored positions of sum p_base (log p_base - log p_q), float64"""
    first, vals, same = CTX // 2, [], []
    for b, q in zip(base_logits, q_logits):
        b = np.asarray(b[first:CTX - 1], np.float64)
        q = np.asarray(q[first:CTX - 1], np.float64)
        lb = b - b.max(1, keepdims=True)
        lb -= np.log(np.exp(lb).sum(1, keepdims=True))
        lq = q - q.max(1, keepdims=True)
        lq -= np.log(np.exp(lq).sum(1, keepdims=True))
        vals.append((np.exp(lb) * (lb - lq)).sum(1))
        same.append(np.argmax(b, 1) == np.argmax(q, 1))
    return float(np.concatenate(vals).mean()), float(np.concatenate(same).mean())


@pytest.mark.parametrize("arch", kzutil.ARCHS)
def test_kl_divergence(arch, text_file, tmp_path):
    f32, q8 = kzutil.ensure_gguf(arch, "f32"), kzutil.ensure_gguf(arch, "q8_0")
    wins = windows(text_file)
    base = tmp_path / "base.kld"
    p = run_kz("perplexity", "-m", f32, "-f", text_file, "-c", CTX, "--chunks", len(wins), "--kv", "f32",
               "--kl-divergence-base", base, "-t", kzutil.THREADS)
    ppl_f32, _ = final_estimate(p.stdout)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["base.kld"]  # no temporary left

    # llama.cpp's layout: magic, n_ctx, n_vocab, n_chunk, the tokens, then 16-bit rows
    raw = base.read_bytes()
    assert raw[:8] == b"_logits_"
    n_ctx, n_vocab, n_chunk = np.frombuffer(raw[8:20], dtype="<i4")
    assert (n_ctx, n_vocab, n_chunk) == (CTX, kzutil.N_VOCAB, len(wins))
    toks = np.frombuffer(raw[20:20 + 4 * CTX * len(wins)], dtype="<i4")
    assert list(toks) == [t for w in wins for t in w]
    nv = 2 * ((n_vocab + 1) // 2) + 4
    assert len(raw) == 20 + 4 * CTX * len(wins) + 2 * nv * (CTX - 1 - CTX // 2) * len(wins)

    same = kl_stats(run_kz("perplexity", "-m", f32, "--kl-divergence", base, "--kv", "f32",
                           "-t", kzutil.THREADS).stdout)
    assert abs(same["kld"]) < 1e-5, same  # the only difference: 16-bit log-probabilities in the file
    assert same["top"] == 100.0, same
    assert abs(same["ppl_q"] / ppl_f32 - 1) < 1e-6, same
    # PPL(base) comes from the file, whose log-probabilities stop 16 below the row's maximum (the
    # random tiny models often put the next token further down: PPL ~1e9)
    lc_f32 = lc_window_logits(f32, wins)
    assert abs(same["ppl_base"] / clamped_ppl(lc_f32, wins) - 1) < 1e-3, same

    ppl_q8, _ = final_estimate(run_kz("perplexity", "-m", q8, "-f", text_file, "-c", CTX, "--chunks", len(wins),
                                      "--kv", "f32", "-t", kzutil.THREADS).stdout)
    q = kl_stats(run_kz("perplexity", "-m", q8, "--kl-divergence", base, "--kv", "f32",
                        "-t", kzutil.THREADS).stdout)
    ref_kld, ref_top = exact_kld(lc_f32, lc_window_logits(q8, wins))
    assert q["kld"] > 1e-4, q
    assert abs(q["kld"] / ref_kld - 1) < 0.05, f"{arch}: KLD ours {q['kld']} vs llama.cpp logits {ref_kld}"
    assert abs(q["top"] / 100 - ref_top) < 0.03, f"{arch}: top-1 ours {q['top']} % vs {100 * ref_top} %"
    assert q["ppl_base"] == same["ppl_base"], q
    assert abs(q["ppl_q"] / ppl_q8 - 1) < 1e-6, q
    print(f"\n{arch}: Q8_0 vs F32: KLD {q['kld']:.6f} (llama.cpp logits: {ref_kld:.6f}), top-1 {q['top']:.2f} % "
          f"({100 * ref_top:.2f} %), PPL {q['ppl_q']:.6g} vs {q['ppl_base']:.6g}; self KLD {same['kld']:.2e}")


def hf_to_gguf_name(name):
    m = re.match(r"^model\.layers\.(\d+)\.(.+)$", name)
    if not m:
        return None
    import convert_hf
    sub = m.group(2) + ".weight"
    g = convert_hf.LAYER_MAP.get(sub) or convert_hf.QWEN35_LAYER_MAP.get(sub)
    return f"blk.{m.group(1)}.{g}" if g else None


@pytest.mark.parametrize("arch", kzutil.ARCHS)
def test_imatrix_vs_torch_hooks(arch, text_file, tmp_path):
    import gguf
    import torch
    import convert_hf
    model = kzutil.ensure_gguf(arch, "f32")
    wins = windows(text_file)
    out = tmp_path / "im.gguf"
    p = run_kz("imatrix", "-m", model, "-f", text_file, "-o", out, "-c", CTX, "--chunks", len(wins), "--kv", "f32",
               "-t", kzutil.THREADS)
    assert "Final estimate" in p.stdout
    r = gguf.GGUFReader(str(out))
    assert bytes(r.fields["general.type"].parts[-1]).decode() == "imatrix"
    assert int(r.fields["imatrix.chunk_count"].parts[-1][0]) == len(wins)
    assert int(r.fields["imatrix.chunk_size"].parts[-1][0]) == CTX
    ours = {t.name: np.asarray(t.data, dtype=np.float64).reshape(-1) for t in r.tensors}

    m = hf_model(arch)
    sums, counts = {}, {}

    def hook(name):
        def f(mod, inp):
            x = inp[0].detach().double().reshape(-1, inp[0].shape[-1])
            sums[name] = sums.get(name, 0) + (x * x).sum(0).numpy()
            counts[name] = counts.get(name, 0) + x.shape[0]
        return f

    for name, mod in m.named_modules():
        g = hf_to_gguf_name(name)
        if isinstance(mod, torch.nn.Linear) and g:
            mod.register_forward_pre_hook(hook(g))
    with torch.no_grad():
        for w in wins:
            m(torch.tensor([w]))
    assert sums, "no hooks fired"
    cfg = m.config
    # the MTP block (blk.<n_layer>, kept by the converter) runs in our forward pass to fill its
    # cache, so its matrices get entries too; transformers has no MTP module to hook
    mtp_prefix = f"blk.{cfg.num_hidden_layers}."
    mtp = {n for n in ours if n.startswith(mtp_prefix)}
    assert bool(mtp) == (arch == "qwen35"), sorted(mtp)
    for n in mtp:
        assert np.all(np.isfinite(ours[n])) and np.all(ours[n] >= 0) and ours[n].max() > 0, n
    assert sorted(set(ours) - mtp) == sorted([n + ".in_sum2" for n in sums] + [n + ".counts" for n in sums])

    worst = 0.0
    for n, s in sums.items():
        if n.endswith("ssm_out.weight") and cfg.linear_num_value_heads != cfg.linear_num_key_heads:
            s = s[convert_hf.v_head_perm(cfg.linear_num_key_heads, cfg.linear_num_value_heads,
                                         cfg.linear_value_head_dim)]
        assert ours[n + ".counts"][0] == counts[n] == CTX * len(wins), n
        got = ours[n + ".in_sum2"]
        assert got.shape == s.shape, n
        rel = np.abs(got - s).max() / np.abs(s).max()
        worst = max(worst, rel)
        assert rel < 1e-4, f"{n}: max rel err {rel:.2e}"
    print(f"\n{arch}: {len(sums)} weights, in_sum2 max rel err vs torch hooks {worst:.2e}")


def test_bad_input(text_file, tmp_path):
    """clear errors, exit 1 (2 for usage), nothing left behind"""
    kz = str(kzutil.require_kazeia())
    model = kzutil.ensure_gguf("qwen3", "q8_0")

    def fails(*args, code=1, want=""):
        p = subprocess.run([kz, *map(str, args)], capture_output=True, text=True, timeout=120)
        assert p.returncode == code and want in p.stderr, (args, p.returncode, p.stderr)

    short = tmp_path / "short.txt"
    short.write_text("Only a few words here.")
    fails("perplexity", "-m", model, "-f", short, "-c", 128, want="you need at least 256 tokens")
    fails("perplexity", "-m", model, "-f", tmp_path / "missing.txt", want="missing.txt")
    fails("perplexity", "-m", model, code=2, want="-f are required")
    fails("perplexity", "-m", model, "-f", text_file, "--kl-divergence", short, "--kl-divergence-base", short,
          code=2, want="exclude")
    fails("perplexity", "-m", model, "--kl-divergence", short, want="not a log-probability file")
    fails("perplexity", "-m", model, "-f", text_file, "-c", 2, code=2, want="-c")
    # a truncated base file
    base = tmp_path / "b.kld"
    run_kz("perplexity", "-m", model, "-f", text_file, "-c", 64, "--chunks", 2, "--kl-divergence-base", base)
    cut = tmp_path / "cut.kld"
    cut.write_bytes(base.read_bytes()[:-1000])
    fails("perplexity", "-m", model, "--kl-divergence", cut, want="truncated")
    fails("imatrix", "-m", model, "-f", text_file, "-o", tmp_path / "no" / "dir" / "im.gguf", "-c", 64, "--chunks", 1,
          want="no/dir")
    fails("imatrix", "-m", model, "-f", short, "-o", tmp_path / "im.gguf", "-c", 128, want="you need at least")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["b.kld", "cut.kld", "short.txt"]


def test_imatrix_counts_follow_llamacpp_batches(text_file, tmp_path):
    """llama-imatrix evaluates a window in batches of n_batch from its start and ignores those of
    fewer than 16 tokens: -c 40 -b 16 gives batches of 16, 16 and 8, so 32 rows per window"""
    import gguf
    out = tmp_path / "im.gguf"
    run_kz("imatrix", "-m", kzutil.ensure_gguf("qwen3", "q8_0"), "-f", text_file, "-o", out, "-c", 40, "-b", 16,
           "--chunks", 3, "--output-frequency", 1)
    r = gguf.GGUFReader(str(out))
    counts = {t.name: float(np.asarray(t.data).reshape(-1)[0]) for t in r.tensors if t.name.endswith(".counts")}
    assert counts and set(counts.values()) == {96.0}, counts
    assert "output.weight.counts" not in counts and "token_embd.weight.counts" not in counts
    assert int(r.fields["imatrix.chunk_count"].parts[-1][0]) == 3
