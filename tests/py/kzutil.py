"""Shared helpers for the Python tests: tiny test models, reference logits, running the engine.

Everything generated lives in <repo>/build-test-models/ (override: env KZ_TEST_MODELS) and is
rebuilt automatically when the generator/converter sources change (a stamp holds their hash).
The engine is found at <repo>/$KZ_BUILD/kazeia (KZ_BUILD defaults to "build").
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
TOOLS = REPO / "tools"
MODELS = Path(os.environ.get("KZ_TEST_MODELS", REPO / "build-test-models"))
BUILD = os.environ.get("KZ_BUILD", "build")
TOKENIZER_DIR = REPO.parent / "shared" / "data" / "qwen3-tokenizer"

ARCHS = ("qwen35", "qwen3")
TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0")
N_VOCAB = 151936
THREADS = 2

# Bounds per type: (max rel over positions, mean rel, min top-1 agreement). Set ~1.5x above what
# was measured with tests/py on these tiny models (our engine and llama.cpp gave nearly the same
# numbers; see build-test-models/report.txt). Random tiny nets amplify rounding ~3-9x (qwen35
# more: GDN read-out normalisation), so quantized bounds vs the float32 model are loose; they
# still catch a broken kernel (uncorrelated logits give rel ~1.4, top-1 ~0).
#   measured vs float32 HF  qwen35: f16 3.6e-3 bf16 2.8e-2 q8_0 9.7e-2 q4_0 0.93 (max rel)
#                           qwen3 : f16 1.3e-3 bf16 1.2e-2 q8_0 3.6e-2 q4_0 0.43
BOUNDS_HF = {
    "qwen35": {"f16": (8e-3, 4e-3, 0.95), "bf16": (5e-2, 3e-2, 0.90),
               "q8_0": (0.15, 0.09, 0.78), "q4_0": (1.1, 0.75, 0.05)},
    "qwen3": {"f16": (3e-3, 2e-3, 0.95), "bf16": (2.5e-2, 1.5e-2, 0.93),
              "q8_0": (0.06, 0.045, 0.90), "q4_0": (0.65, 0.5, 0.15)},
}
# vs transformers computing with the GGUF's rounded weights (activation rounding only):
#   measured  qwen35: f16 2.1e-3 bf16 1.9e-2 q8_0 7.7e-2 q4_0 7.6e-2 (ours; llama.cpp the same)
#             qwen3 : f16 8.1e-4 bf16 7.1e-3 q8_0 2.2e-2 q4_0 2.5e-2
BOUNDS_HF_SAME_WEIGHTS = {
    "qwen35": {"f16": (5e-3, 3e-3, 0.95), "bf16": (3.5e-2, 2e-2, 0.90),
               "q8_0": (0.12, 0.07, 0.85), "q4_0": (0.12, 0.07, 0.75)},
    "qwen3": {"f16": (2e-3, 1.2e-3, 0.95), "bf16": (1.5e-2, 1e-2, 0.93),
              "q8_0": (0.04, 0.03, 0.90), "q4_0": (0.045, 0.035, 0.85)},
}
# ours vs llama.cpp on the same file. Both round activations the same way, so what differs is
# f32 noise (~3e-6 in qwen35) flipping an occasional rounding step, which the net amplifies:
#   measured  qwen35: f16 1.8e-3 bf16 8.2e-3 q8_0 3.2e-2 q4_0 6.3e-3; qwen3: 6.7e-4 3.2e-3 8e-8 1.6e-3
BOUNDS_LCPP = {
    "qwen35": {"f32": (1e-4, 1e-5, 1.0), "f16": (5e-3, 2e-3, 0.97), "bf16": (2e-2, 8e-3, 0.95),
               "q8_0": (6e-2, 3.5e-2, 0.90), "q4_0": (6e-2, 3.5e-2, 0.90)},
    "qwen3": {"f32": (1e-4, 1e-5, 1.0), "f16": (3e-3, 1.5e-3, 0.97), "bf16": (1e-2, 5e-3, 0.95),
              "q8_0": (2e-2, 1e-2, 0.95), "q4_0": (2e-2, 1e-2, 0.95)},
}

if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

# ~70 tokens of ordinary text (prose, numbers, punctuation, code, non-ASCII) for the main checks.
TEXT_SHORT = (
    "The quick brown fox jumps over the lazy dog. In 1492, Columbus sailed the ocean blue; "
    "meanwhile Kazeia runs GGUF models on phones (ARM64) and x86-64 laptops. "
    "def f(x): return x**2 + 1  # café, naïve, 東京"
)

# A longer passage for the 500-token prefill check (self-contained, so references never drift).
TEXT_LONG = (
    "Once upon a time, in a small village at the edge of a great forest, there lived an old "
    "clockmaker named Elias. Every morning he opened the shutters of his workshop at exactly "
    "seven o'clock, wound the forty-two clocks that hung on the walls, and set a kettle of water "
    "on the stove. The villagers said you could set your watch by him, and many of them did. "
    "One winter, a girl of about twelve knocked on his door carrying a broken pocket watch. "
    "\"It was my grandmother's,\" she said. \"Can you make it run again?\" Elias turned it over in "
    "his hands: the crystal was cracked, the mainspring had snapped, and three teeth were missing "
    "from the escape wheel. \"It will take time,\" he answered, \"perhaps a month.\"\n\n"
    "Chapter 2. Measurements\n"
    "| part | diameter (mm) | teeth |\n|---|---|---|\n| escape wheel | 6.35 | 15 |\n"
    "| third wheel | 8.10 | 60 |\n| center wheel | 10.42 | 80 |\n\n"
    "He wrote a small program to check the gear ratios:\n"
    "```python\nratios = {\"center\": 80 / 10, \"third\": 60 / 8, \"fourth\": 56 / 7}\n"
    "for name, r in sorted(ratios.items()):\n    print(f\"{name:>8}: {r:6.3f}\")\n```\n"
    "The output surprised him: the fourth wheel turned eight times for every turn of the third, "
    "not seven and a half. Somebody, long ago, had replaced a wheel with one that did not belong. "
    "Über die Jahre hatte die Uhr viele Besitzer gehabt; 每一位主人都留下了自己的痕迹。 "
    "Les réparations précédentes étaient maladroites mais honnêtes. "
    "By the end of February the watch was ticking again, 18,000 beats per hour, losing no more "
    "than four seconds a day. The girl came back on the first of March, listened to it for a "
    "long while, and then asked whether he would teach her how it worked. He said yes. "
    "Years later, when people in the village set their watches, they set them by her.\n\n"
    "Appendix: a checklist for opening a movement. 1) Let down the mainspring before anything "
    "else. 2) Photograph every step; screws that look identical rarely are. 3) Clean, inspect, "
    "oil sparingly: one drop too many is worse than none at all. 4) Never force a wheel. "
    "Q: Why does a watch gain time in the cold? A: It usually loses; steel hairsprings stiffen "
    "less than brass balance wheels shrink, but modern alloys largely cancel both effects."
)


# ---------------------------------------------------------------------------------------------
# stamps: regenerate derived files when the code that makes them changes

def _file_hash(paths):
    h = hashlib.sha256()
    for p in paths:
        p = Path(p)
        h.update(p.name.encode())
        h.update(p.read_bytes() if p.is_file() else b"<missing>")
    return h.hexdigest()[:16]


def hf_stamp():
    return _file_hash([TOOLS / "make_tiny_hf.py", TOKENIZER_DIR / "tokenizer.json"])


def gguf_stamp():
    return hf_stamp() + _file_hash([TOOLS / "convert_hf.py", TOOLS / "convert_tokenizer.py"])


def _fresh(path, stamp):
    s = Path(str(path) + ".stamp")
    return Path(path).exists() and s.is_file() and s.read_text() == stamp


def _mark(path, stamp):
    Path(str(path) + ".stamp").write_text(stamp)


class _Lock:
    """Exclusive lock on build-test-models/ so concurrent pytest runs don't build the same files."""

    def __enter__(self):
        import fcntl
        MODELS.mkdir(parents=True, exist_ok=True)
        self.f = open(MODELS / ".lock", "w")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        import fcntl
        fcntl.flock(self.f, fcntl.LOCK_UN)
        self.f.close()


# ---------------------------------------------------------------------------------------------
# models

def hf_dir(arch):
    return MODELS / "hf" / f"{arch}-tiny"


def ensure_hf(arch):
    """Build the tiny HF checkpoint (subprocess: keeps torch state of the test process clean)."""
    d = hf_dir(arch)
    stamp = hf_stamp()
    if _fresh(d, stamp):
        return d
    with _Lock():
        if not _fresh(d, stamp):
            d.parent.mkdir(parents=True, exist_ok=True)
            which = "qwen35,qwen35-vlm" if arch == "qwen35" else arch
            run([sys.executable, str(TOOLS / "make_tiny_hf.py"), str(d.parent), "--which", which,
                 "--tokenizer", str(TOKENIZER_DIR)])
            _mark(d, stamp)
    return d


def ensure_hf_vlm():
    ensure_hf("qwen35")
    return MODELS / "hf" / "qwen35-tiny-vlm"


def gguf_path(arch, typ):
    return MODELS / "gguf" / f"{arch}-tiny-{typ}.gguf"


def ensure_gguf(arch, typ, src=None, out=None):
    import convert_hf
    src = src or ensure_hf(arch)
    out = Path(out or gguf_path(arch, typ))
    stamp = gguf_stamp()
    if _fresh(out, stamp):
        return out
    with _Lock():
        if not _fresh(out, stamp):
            out.parent.mkdir(parents=True, exist_ok=True)
            convert_hf.convert(str(src), str(out), typ, verbose=False)
            _mark(out, stamp)
    return out


# ---------------------------------------------------------------------------------------------
# tokens

def tokenize(text):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    return tok.encode(text, add_special_tokens=False).ids


def tokens_short():
    ids = tokenize(TEXT_SHORT)
    assert 64 <= len(ids) <= 90, f"TEXT_SHORT gives {len(ids)} tokens, want ~70"
    return ids


def tokens_long(n=500):
    ids = tokenize(TEXT_LONG)
    assert len(ids) >= n, f"TEXT_LONG gives only {len(ids)} tokens, want >= {n}"
    return ids[:n]


# ---------------------------------------------------------------------------------------------
# reference logits (transformers, float32, eager attention), cached on disk

F32_WEIGHTS = ("conv1d.weight", "in_proj_a.weight", "in_proj_b.weight")  # stay F32 in every GGUF


def round_trip_weights(model, typ):
    """Replace every 2-D weight the converter stores as `typ` by its typ-rounded value, so the
    HF model computes with exactly the GGUF's weights (only activations stay float32).
    Valid because the converter's transforms on these matrices are row permutations and
    32-aligned column-block permutations, which commute with per-row 32-blocks."""
    import torch
    import gguf
    qt = {"f16": gguf.GGMLQuantizationType.F16, "bf16": gguf.GGMLQuantizationType.BF16,
          "q8_0": gguf.GGMLQuantizationType.Q8_0, "q4_0": gguf.GGMLQuantizationType.Q4_0}[typ]
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() != 2 or name.endswith(F32_WEIGHTS):
                continue
            a = p.detach().numpy()
            t = qt if (qt in (gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16)
                       or a.shape[1] % 32 == 0) else gguf.GGMLQuantizationType.F16
            q = gguf.quants.quantize(a, t)
            p.copy_(torch.from_numpy(gguf.quants.dequantize(q, t).reshape(a.shape).astype(np.float32)))


def hf_logits(arch, tokens, weights="f32"):
    """transformers float32 logits; weights != "f32": with weights rounded as in that GGUF type."""
    key = hashlib.sha256((hf_stamp() + arch + weights + ",".join(map(str, tokens))).encode()).hexdigest()[:16]
    cache = MODELS / "ref" / f"{arch}-{weights}-{len(tokens)}-{key}.npy"
    if cache.is_file():
        return np.load(cache)
    import torch
    from transformers import AutoModelForCausalLM
    d = ensure_hf(arch)
    torch.set_num_threads(THREADS)
    m = AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32, attn_implementation="eager").eval()
    if weights != "f32":
        round_trip_weights(m, weights)
    with torch.no_grad():
        lg = m(torch.tensor([tokens], dtype=torch.long)).logits[0].float().numpy()
    cache.parent.mkdir(parents=True, exist_ok=True)
    for old in cache.parent.glob(f"{arch}-{weights}-{len(tokens)}-*.npy"):
        old.unlink()  # references of older model versions (up to 300 MB each)
    tmp = cache.with_name(f"{cache.stem}.{os.getpid()}.tmp.npy")
    np.save(tmp, lg)
    os.replace(tmp, cache)
    return lg


# ---------------------------------------------------------------------------------------------
# the engine

def kazeia_bin():
    return REPO / BUILD / "kazeia"


def require_kazeia():
    b = kazeia_bin()
    if not (b.is_file() and os.access(b, os.X_OK)):
        raise AssertionError(f"engine binary {b} not built (run `make`, or set KZ_BUILD)")
    return b


def run(cmd, timeout=600):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError(f"command failed ({p.returncode}): {' '.join(map(str, cmd))}\n"
                             f"stdout: {p.stdout[-2000:]}\nstderr: {p.stderr[-2000:]}")
    return p


def kz_logits(model, tokens, prefill=None, threads=THREADS, kv="f32", n_vocab=N_VOCAB):
    """`kazeia logits`: first `prefill` tokens in one batch, the rest one at a time.
    Returns float32 [len(tokens), n_vocab]."""
    b = require_kazeia()
    with tempfile.TemporaryDirectory() as td:
        out = Path(td) / "logits.bin"
        cmd = [b, "logits", "-m", model, "--tokens", ",".join(map(str, tokens)), "-t", threads,
               "--kv", kv, "-o", out]
        if prefill is not None:
            cmd += ["--prefill", prefill]
        run(cmd)
        raw = np.fromfile(out, dtype=np.float32)
    want = len(tokens) * n_vocab
    if raw.size != want:
        raise AssertionError(f"kazeia logits wrote {raw.size} floats, want {len(tokens)} x {n_vocab} = {want}")
    return raw.reshape(len(tokens), n_vocab)


# ---------------------------------------------------------------------------------------------
# comparisons and the report

def rel_err(a, b):
    """Per-position ||a - b|| / ||b|| (rows), in float64, a few rows at a time (500 x 151936)."""
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"shapes differ: {a.shape} vs {b.shape}"
    out = np.empty(a.shape[0])
    for r in range(0, a.shape[0], 32):
        x = a[r:r + 32].astype(np.float64)
        y = b[r:r + 32].astype(np.float64)
        out[r:r + 32] = np.linalg.norm(x - y, axis=1) / np.linalg.norm(y, axis=1)
    return out


def top1(a, b):
    return float(np.mean(np.argmax(a, axis=1) == np.argmax(b, axis=1)))


class Report:
    """Collects result rows; written to build-test-models/report.txt at session end."""

    def __init__(self):
        self.rows = []

    def add(self, suite, arch, typ, what, max_rel, mean_rel, top1_frac, n, bound):
        self.rows.append(dict(suite=suite, arch=arch, type=typ, what=what, max_rel=float(max_rel),
                              mean_rel=float(mean_rel), top1=float(top1_frac), n=int(n), bound=bound))

    def table(self):
        if not self.rows:
            return ""
        hdr = f"{'suite':<14} {'arch':<7} {'type':<5} {'what':<24} {'n':>4} {'max rel':>10} {'mean rel':>10} {'top1':>7} {'bound':>8}"
        lines = [hdr, "-" * len(hdr)]
        for r in self.rows:
            lines.append(f"{r['suite']:<14} {r['arch']:<7} {r['type']:<5} {r['what']:<24} {r['n']:>4} "
                         f"{r['max_rel']:>10.3e} {r['mean_rel']:>10.3e} {r['top1']:>7.3f} {str(r['bound']):>8}")
        return "\n".join(lines) + "\n"

    def write(self, path):
        """This run's rows only (a partial run gives a partial table), plus a JSON copy."""
        if not self.rows:
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.table())
        path.with_suffix(".json").write_text(json.dumps(self.rows, indent=1))


# ---------------------------------------------------------------------------------------------
# llama.cpp (llama-cpp-python) on the same GGUF files

def lc_llama(model_path, **kw):
    """llama_cpp.Llama with the CPU "extra buffer" types (runtime repack, AMX) off: the plain
    ggml_vec_dot path is the reference these tests want, and a llama-cpp-python built with
    GGML_NATIVE on an AMX host segfaults in ggml_backend_amx_mul_mat when the sandbox does not
    grant AMX tiles (seen with 0.3.36). The bench (bench/compare_llamacpp.py) keeps them on."""
    import llama_cpp
    import llama_cpp.llama_cpp as lcc
    orig = lcc.llama_model_default_params

    def plain():
        p = orig()
        p.use_extra_bufts = False
        return p

    lcc.llama_model_default_params = plain
    try:
        return llama_cpp.Llama(model_path=str(model_path), **kw)
    finally:
        lcc.llama_model_default_params = orig


def lc_logits(model, tokens, prefill=None, threads=THREADS):
    """All-position logits from llama.cpp: `prefill` tokens in one batch, then one at a time
    (same schedule as kz_logits). KV cache in F32 so only weights/activations differ."""
    import llama_cpp
    n = len(tokens)
    prefill = n if prefill is None else prefill
    llm = lc_llama(model, n_ctx=((n + 15) // 16) * 16 + 16, n_batch=max(prefill, 1),
                          n_ubatch=max(prefill, 1), logits_all=True, n_threads=threads, n_threads_batch=threads,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, verbose=False)
    try:
        if prefill > 0:
            llm.eval(list(tokens[:prefill]))
        for t in tokens[prefill:]:
            llm.eval([t])
        out = np.array(llm.scores[:n], dtype=np.float32)
    finally:
        llm.close()
    return out


# ---------------------------------------------------------------------------------------------
# fast GGUF reader for the tests (gguf.GGUFReader takes ~8 s per file on the 151936-token vocab;
# this one is checked against GGUFReader in test_vs_transformers.py)

_GG_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def read_gguf(path):
    """-> (kv: {key: value}, tensors: {name: (ggml_type, ne list, data uint8 memmap)})."""
    import struct
    buf = np.memmap(path, dtype=np.uint8, mode="r")
    mv = memoryview(buf)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, mv, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = bytes(mv[pos:pos + n]).decode("utf-8", errors="surrogateescape")
        pos += n
        return s

    def value(t):
        nonlocal pos
        if t == 8:
            return string()
        if t == 9:
            et, n = take("<I"), take("<Q")
            if et in _GG_SCALAR:  # numeric array: one frombuffer instead of n unpacks
                arr = np.frombuffer(mv, dtype=np.dtype(_GG_SCALAR[et]), count=n, offset=pos)
                pos += arr.nbytes
                return arr.tolist()
            return [value(et) for _ in range(n)]
        return take(_GG_SCALAR[t])

    assert bytes(mv[0:4]) == b"GGUF", f"{path}: not a GGUF file"
    pos = 4
    version, n_t, n_kv = take("<I"), take("<Q"), take("<Q")
    assert version == 3, f"{path}: GGUF version {version}"
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("<I"))
    infos = []
    for _ in range(n_t):
        name = string()
        nd = take("<I")
        ne = [take("<Q") for _ in range(nd)]
        typ, off = take("<I"), take("<Q")
        infos.append((name, typ, ne, off))
    align = kv.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    from gguf import GGMLQuantizationType, GGML_QUANT_SIZES
    tensors = {}
    for name, typ, ne, off in infos:
        qt = GGMLQuantizationType(typ)
        bs, ts = GGML_QUANT_SIZES[qt]
        n = int(np.prod(ne)) if ne else 1
        nbytes = n // bs * ts
        tensors[name] = (qt, ne, buf[base + off: base + off + nbytes])
    return kv, tensors


def gguf_f32(entry):
    """(type, ne, raw) -> float32 array in row-major (HF) orientation."""
    import gguf
    qt, ne, raw = entry
    shape = tuple(int(x) for x in reversed(ne))
    if qt == gguf.GGMLQuantizationType.F32:
        return np.frombuffer(raw, dtype=np.float32).reshape(shape)
    if qt == gguf.GGMLQuantizationType.F16:
        return np.frombuffer(raw, dtype=np.float16).reshape(shape).astype(np.float32)
    rows = raw.reshape(shape[:-1] + (-1,)) if len(shape) > 1 else raw
    return gguf.quants.dequantize(np.asarray(rows), qt).reshape(shape).astype(np.float32)


def window_nlls(logits, win):
    """llama-perplexity's scoring of one window: -log p(win[i+1]) for i in [n/2, n-1), n = len(win),
    log-softmax in float64"""
    n = len(win)
    first = n // 2
    lg = np.asarray(logits[first:n - 1], dtype=np.float64)
    mx = lg.max(axis=1, keepdims=True)
    lse = np.log(np.exp(lg - mx).sum(axis=1)) + mx[:, 0]
    return lse - lg[np.arange(len(lg)), np.asarray(win[first + 1:n])]


def lc_quantize(src, out, ftype, imp=None, nthread=2):
    """llama.cpp's quantizer (llama_model_quantize) on src -> out; imp: {tensor: importance vector}"""
    import ctypes
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = nthread
    keep = []
    if imp:
        arr = (llama_cpp.llama_model_imatrix_data * (len(imp) + 1))()
        for i, (name, v) in enumerate(imp.items()):
            v = np.ascontiguousarray(v, dtype=np.float32)
            keep += [v, name.encode()]
            arr[i].name = keep[-1]
            arr[i].data = v.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            arr[i].size = v.size
        arr[len(imp)].name = None
        p.imatrix = ctypes.cast(arr, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
        keep.append(arr)
    return llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(p))
