"""The built-in default model (models/kazeia-default.gguf, trained by training/) against
independent references, on held-out text it never saw (training/data/heldout-sample.txt):

- its tokenizer: ids equal to HF `tokenizers` with training/tokenizer/tokenizer.json;
- perplexity (llama-perplexity's windows, second half scored): our engine on the F32 file made
  from it (`kazeia quantize ... F32`) within 0.1 % of transformers running the same weights
  (tests/py/gguf2hf.py inverts the converter), and our engine on the shipped file within 0.5 %
  of llama.cpp (llama-cpp-python) on that file;
- `kazeia run -p` without -m is that file (same output as `-m models/kazeia-default.gguf --raw`),
  sampling as its general.sampling.* keys recommend,
  and the text is real: the trained model's perplexity is far below a random model's (the
  vocabulary size).
"""
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import kzutil  # noqa: E402
import gguf2hf  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "models" / "kazeia-default.gguf"
TEXT = ROOT / "training" / "data" / "heldout-sample.txt"
TOKENIZER = ROOT / "training" / "tokenizer" / "tokenizer.json"
CTX = 256
MAX_PPL = 60.0  # the trained model: ~40 on this text; a uniform guess gives 4096


def run_kz(*args, timeout=600):
    p = subprocess.run([str(kzutil.require_kazeia()), *map(str, args)], capture_output=True, timeout=timeout)
    assert p.returncode == 0, f"kazeia {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr[-3000:]!r}"
    return p


@pytest.fixture(scope="module")
def ids():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(TOKENIZER)).encode(TEXT.read_text(encoding="utf-8"), add_special_tokens=False).ids


def test_tokenizer_matches_hf(ids):
    out = run_kz("tokenize", "-m", MODEL, "-f", TEXT).stdout.decode()
    ours = [int(x) for x in out.split()]
    assert ours == ids, f"first difference at token {next(i for i, (a, b) in enumerate(zip(ours, ids)) if a != b)}"


def test_builtin_is_the_file_and_writes_text():
    for prompt in ("The history of the city begins", "Le lendemain matin, le jeune homme"):
        a = run_kz("run", "-p", prompt, "-n", 24, "--seed", 1, "-t", kzutil.THREADS)
        b = run_kz("run", "-m", MODEL, "--raw", "-p", prompt, "-n", 24, "--seed", 1, "-t", kzutil.THREADS)
        # the file's recommended sampler (general.sampling.*, from training/export.py's
        # generation_config.json) is what both ran
        c = run_kz("run", "-m", MODEL, "--raw", "--temp", 0.7, "--top-k", 40, "--top-p", 0.95, "--repeat-penalty",
                   1.1, "-p", prompt, "-n", 24, "--seed", 1, "-t", kzutil.THREADS)
        assert a.stdout == b.stdout == c.stdout and len(a.stdout.strip()) > 20, (a.stdout, b.stdout, c.stdout)
        assert b"generated tokens: 24" in a.stderr, a.stderr
        words = a.stdout.decode("utf-8", "replace").split()
        assert len(words) >= 8, a.stdout


def windows(ids):
    n = len(ids) // CTX
    assert n >= 8
    return [ids[i * CTX:(i + 1) * CTX] for i in range(n)]


def ppl(v):
    return float(np.exp(np.concatenate(v).mean()))


def kz_ppl(model, n_chunks, kv):
    out = run_kz("perplexity", "-m", model, "-f", TEXT, "-c", CTX, "--chunks", n_chunks, "--kv", kv,
                 "-t", kzutil.THREADS).stdout.decode()
    m = re.search(r"Final estimate: PPL = ([0-9.eE+-]+)", out)
    assert m, out
    return float(m.group(1))


def test_perplexity_vs_transformers_and_llamacpp(ids, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM
    wins = windows(ids)
    f32 = tmp_path / "default-f32.gguf"
    run_kz("quantize", MODEL, f32, "F32")
    ours_f32 = kz_ppl(f32, len(wins), "f32")
    hf_dir = gguf2hf.convert(f32, tmp_path / "hf")
    torch.set_num_threads(kzutil.THREADS)
    m = AutoModelForCausalLM.from_pretrained(str(hf_dir), dtype=torch.float32, attn_implementation="eager").eval()
    with torch.no_grad():
        ref = ppl([kzutil.window_nlls(m(torch.tensor([w])).logits[0].float().numpy(), w) for w in wins])
    assert abs(ours_f32 / ref - 1) < 1e-3, f"F32: ours {ours_f32} vs transformers {ref}"
    assert ref < MAX_PPL, f"held-out perplexity {ref}: not a trained model"

    import llama_cpp
    llm = kzutil.lc_llama(MODEL, n_ctx=CTX, n_batch=CTX, n_ubatch=CTX, logits_all=True, n_threads=kzutil.THREADS,
                          n_threads_batch=kzutil.THREADS, type_k=llama_cpp.GGML_TYPE_F32,
                          type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
    try:
        lv = []
        for w in wins:
            llm.reset()
            llm.eval(list(w))
            lv.append(kzutil.window_nlls(np.array(llm.scores[:CTX], dtype=np.float32), w))
    finally:
        llm.close()
    lc = ppl(lv)
    ours = kz_ppl(MODEL, len(wins), "f32")
    assert abs(ours / lc - 1) < 5e-3, f"shipped file: ours {ours} vs llama.cpp {lc}"
    print(f"\ndefault model, {len(wins)} x {CTX} tokens held out: PPL F32 ours {ours_f32:.4f} transformers {ref:.4f} "
          f"({ours_f32 / ref - 1:+.2e}); shipped file ours {ours:.4f} llama.cpp {lc:.4f} ({ours / lc - 1:+.2e})")
