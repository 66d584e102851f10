"""`kazeia bench` works and reports consistent numbers (not a timing test: speeds only have to be
positive and self-consistent). The weight bytes it reports per decoded token are recomputed here
from the GGUF tensor table with gguf.GGUFReader."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from gguf import GGUFReader  # a missing package must fail the suite, not skip it

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("KZ_BUILD", "build")
KAZEIA = BUILD / "kazeia"
MKMODEL = BUILD / "kz-mkmodel"

# 1-D tensors and the conv kernel: the engine keeps them as f32 whatever the file type
VEC_SUFFIXES = ("_norm.weight", "attn_norm.weight", "ssm_a", "ssm_dt.bias", "ssm_conv1d.weight")


def run(*args, check=True):
    r = subprocess.run([str(KAZEIA), *map(str, args)], capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, f"kazeia {' '.join(map(str, args))} -> {r.returncode}\n{r.stderr}"
    return r


def kv_int(reader, key):
    f = reader.fields.get(key)
    return None if f is None else int(f.parts[f.data[0]][0])


def expected_weight_bytes(path):
    """Bytes one decode step reads: main layers (MTP blocks excluded), output norm, LM head
    (output.weight, or token_embd when tied) and one token-embedding row."""
    rd = GGUFReader(str(path))
    arch = bytes(rd.fields["general.architecture"].parts[-1]).decode()
    n_layer = kv_int(rd, f"{arch}.block_count") - (kv_int(rd, f"{arch}.nextn_predict_layers") or 0)
    t = {x.name: x for x in rd.tensors}

    def size(x):
        return int(x.n_elements) * 4 if x.name.endswith(VEC_SUFFIXES) else int(x.n_bytes)

    layers = 0
    for name, x in t.items():
        m = re.match(r"blk\.(\d+)\.", name)
        if m and int(m.group(1)) < n_layer:
            layers += size(x)
    emb = t["token_embd.weight"]
    head = t.get("output.weight", emb)
    n_vocab = int(emb.shape[1])
    parts = {"layers": layers, "lm_head": int(head.n_bytes), "output_norm": size(t["output_norm.weight"]),
             "token_embd_row": int(emb.n_bytes) // n_vocab}
    info = {"n_layer": n_layer, "n_vocab": n_vocab, "arch": arch,
            "n_params": sum(int(x.n_elements) for x in rd.tensors),
            "model_bytes": sum(int(x.n_bytes) for x in rd.tensors)}
    return parts, info


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("bench")
    out = {}
    # qwen35 with a separate LM head and one MTP block (must not be counted); qwen3 tied
    for name, args in {"qwen35": ["--arch", "qwen35", "--type", "q4_0", "--untied", "--nextn", "1"],
                       "qwen3": ["--arch", "qwen3", "--type", "q8_0", "--tied"]}.items():
        p = d / f"{name}.gguf"
        r = subprocess.run([str(MKMODEL), *args, "--seed", "7", "-q", "-o", str(p)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[name] = p
    return out


@pytest.mark.parametrize("arch", ["qwen35", "qwen3"])
def test_bench_json(models, arch):
    path = models[arch]
    r = run("bench", "-m", path, "-p", 16, "-n", 4, "-r", 2, "-t", 2, "--json", "--membw-gbs", 12.5)
    j = json.loads(r.stdout)
    parts, info = expected_weight_bytes(path)

    for k in ("prefill_tok_s", "decode_tok_s"):
        s = j[k]
        assert len(s["runs"]) == 2 and all(v > 0 for v in s["runs"]), s
        assert 0 < s["min"] <= s["median"] <= s["max"] and s["stddev"] >= 0, s
    assert (j["n_prompt"], j["n_gen"], j["runs"], j["threads"], j["kv"]) == (16, 4, 2, 2, "f16")
    for k in ("arch", "n_layer", "n_vocab", "n_params", "model_bytes"):
        assert j[k] == info[k], (k, j[k], info[k])

    assert j["weight_bytes"] == parts
    assert j["weight_bytes_per_token"] == sum(parts.values())
    # consistency of the derived numbers (printed with 6 significant digits)
    bw = j["weight_bytes_per_token"] * j["decode_tok_s"]["median"] / 1e9
    assert j["decode_gbs"] == pytest.approx(bw, rel=1e-4)
    assert j["membw_gbs"] == 12.5 and j["membw_measured"] is False
    assert j["decode_bw_pct"] == pytest.approx(100 * j["decode_gbs"] / 12.5, rel=1e-3)
    # peak RSS is in bytes and covers the weights every decode step touched
    assert j["peak_rss_bytes"] >= j["weight_bytes_per_token"]


def test_bench_human_and_options(models):
    r = run("bench", "-m", models["qwen35"], "-p", 8, "-n", 0, "-r", 1, "--warmup", 0, "-t", 1, "--no-membw",
            "--kv", "f32")
    assert re.search(r"\|\s+pp8\s+\|", r.stdout) and "tg" not in r.stdout.split("runs:")[0], r.stdout
    j = json.loads(run("bench", "-m", models["qwen3"], "-p", 0, "-n", 3, "-r", 1, "-t", 1, "--no-membw",
                       "--decode", "random", "--json").stdout)
    assert "prefill_tok_s" not in j and j["decode_tok_s"]["median"] > 0 and j["decode"] == "random"
    assert "decode_bw_pct" not in j and "membw_gbs" not in j


def test_bench_membw():
    r = run("bench", "--membw", "-t", 1, "--membw-mib", 64, "--membw-passes", 2, "--json")
    j = json.loads(r.stdout)
    assert j["membw_gbs"] > 0 and j["membw_best_gbs"] >= j["membw_gbs"] and j["threads"] == 1
    # the read build is the fastest of those this CPU runs (each one's checksum is verified while
    # they are compared, so a wrong build fails the open)
    flags = _cpu_flags()
    allowed = {"generic"}
    if os.uname().machine == "x86_64":
        allowed |= {"avx2"} if {"avx2", "fma", "f16c"} <= flags else set()
        allowed |= {"avx512"} if "avx512f" in flags else set()
    assert j["membw_loads"] in allowed, (j["membw_loads"], allowed)
    t = run("bench", "--membw", "-t", 2, "--membw-mib", 64, "--membw-passes", 1).stdout
    assert re.search(r"\(2 threads, 64 MiB buffer, 1 passes, (generic|avx2|avx512) loads\)", t), t
    # threads take 1 MiB chunks from a counter: 3 threads on 5 MiB (rounded down to 768-byte units)
    # end on a short chunk, and every build's checksum must still come out right
    j = json.loads(run("bench", "--membw", "-t", 3, "--membw-mib", 5, "--membw-passes", 3, "--json").stdout)
    assert j["membw_gbs"] > 0 and j["threads"] == 3


def _rt_throttled():
    try:
        rt = int(Path("/proc/sys/kernel/sched_rt_runtime_us").read_text())
        period = int(Path("/proc/sys/kernel/sched_rt_period_us").read_text())
    except (OSError, ValueError):
        return None
    return 0 <= rt < period


def test_bench_rt_throttle_note():
    args = ["bench", "--membw", "-t", 1, "--membw-mib", 8, "--membw-passes", 1]
    assert "real-time policy" not in run(*args).stderr
    throttled = _rt_throttled()
    try:
        r = subprocess.run(["chrt", "-f", "1", str(KAZEIA), *map(str, args)], capture_output=True, text=True,
                           timeout=120)
    except FileNotFoundError:
        pytest.skip("no chrt here")
    if r.returncode != 0 and "chrt" in r.stderr:
        pytest.skip("no permission for a real-time policy: " + r.stderr.strip())
    assert r.returncode == 0, r.stderr
    if throttled is None:
        return
    assert ("real-time policy with RT throttling on" in r.stderr) == throttled, r.stderr


def test_bench_errors(models, tmp_path):
    assert run("bench", "--help").stdout.startswith("usage: kazeia bench")
    r = run("bench", "-p", 4, check=False)
    assert r.returncode == 2 and "-m MODEL.gguf is required" in r.stderr
    r = run("bench", "-m", models["qwen3"], "-p", "x", check=False)
    assert r.returncode == 2 and "bad value 'x' for -p" in r.stderr
    r = run("bench", "-m", models["qwen3"], "--kv", "q2", check=False)
    assert r.returncode == 2 and "--kv" in r.stderr
    r = run("bench", "-m", models["qwen3"], "-p", 0, "-n", 0, check=False)
    assert r.returncode == 2 and "nothing to measure" in r.stderr
    missing = tmp_path / "nope.gguf"
    r = run("bench", "-m", missing, "-p", 4, "-n", 1, check=False)
    assert r.returncode == 1 and str(missing) in r.stderr


def _cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def test_bench_repack_reported(models):
    """The repack is reported in the JSON: packed bytes > 0 where the 16-row Q4_0 kernel exists
    (x86 AVX2 and AVX-512 VNNI levels), 0 when the scalar level is forced; on by default, off with
    --no-repack."""
    path = models["qwen35"]  # Q4_0
    base = ["bench", "-m", path, "-p", 8, "-n", 2, "-r", 1, "-t", 2, "--json", "--membw-gbs", 10]
    off = json.loads(run(*base, "--no-repack").stdout)
    assert off["repack"] == 0 and off["repacked_bytes"] == 0
    dflt = json.loads(run(*base).stdout)
    assert dflt["repack"] == 1
    on = json.loads(run(*base, "--repack").stdout)
    assert on["repacked_bytes"] == dflt["repacked_bytes"]
    assert on["repack"] == 1
    assert 0 <= on["repacked_bytes"] <= on["model_bytes"]
    assert on["prefill_tok_s"]["median"] > 0 and on["decode_tok_s"]["median"] > 0
    if {"avx2", "fma", "f16c"} <= _cpu_flags() and os.environ.get("KZ_ISA", "avx2") != "scalar":
        assert on["repacked_bytes"] > on["model_bytes"] // 2, on["repacked_bytes"]
    env = dict(os.environ, KZ_ISA="scalar")
    r = subprocess.run([str(KAZEIA), *map(str, base), "--repack"], capture_output=True, text=True,
                       timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["repacked_bytes"] == 0


def test_bench_membw_interleaved(models):
    """Bandwidth samples between decode tokens: one before the first token and one after every
    K tokens (and the last), per measured run; each run's efficiency is its decode GB/s over the
    median of its own samples (and, reported beside it, over their mean). Peak RSS leaves the 64 MiB sampling buffer out."""
    n, every, runs = 9, 4, 2
    j = json.loads(run("bench", "-m", models["qwen3"], "-p", 8, "-n", n, "-r", runs, "-t", 2, "--json",
                       "--membw-every", every, "--membw-sample-mib", 64, "--membw-mib", 16).stdout)
    per_run = 1 + (n + every - 1) // every
    samples = j["membw_interleaved_gbs"]["runs"]
    assert len(samples) == runs * per_run and all(g > 0 for g in samples)
    pct = j["decode_bw_pct_interleaved"]["runs"]
    assert len(pct) == runs and j["membw_every"] == every
    assert j["membw_interleaved_loads"] in ("generic", "avx2", "avx512")
    for r in range(runs):
        s = sorted(samples[r * per_run:(r + 1) * per_run])
        med = s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])
        want = 100 * j["weight_bytes_per_token"] * j["decode_tok_s"]["runs"][r] / 1e9 / med
        assert pct[r] == pytest.approx(want, rel=1e-3)
        mean = sum(s) / len(s)  # the same against the samples' mean
        want_m = 100 * j["weight_bytes_per_token"] * j["decode_tok_s"]["runs"][r] / 1e9 / mean
        assert j["decode_bw_pct_interleaved_vs_mean"]["runs"][r] == pytest.approx(want_m, rel=1e-3)
    # the sampling buffer is not the model's memory
    ref = json.loads(run("bench", "-m", models["qwen3"], "-p", 8, "-n", n, "-r", 1, "-t", 2, "--json",
                         "--no-membw").stdout)
    assert j["peak_rss_bytes"] < ref["peak_rss_bytes"] + (32 << 20)
    # off: no samples, no interleaved fields
    k = json.loads(run("bench", "-m", models["qwen3"], "-p", 0, "-n", 3, "-r", 1, "-t", 1, "--json",
                       "--membw-every", 0, "--membw-mib", 16).stdout)
    assert "membw_interleaved_gbs" not in k and k["membw_measured"] is True


# --matmuls parts and the GGUF tensors each one streams (main layers only; MTP blocks excluded)
MM_PARTS = {"gdn in (qkv, z, b, a)": ("attn_qkv", "attn_gate", "ssm_beta", "ssm_alpha"),
            "gdn out": ("ssm_out",), "attn in (q, k, v)": ("attn_q", "attn_k", "attn_v"),
            "attn out": ("attn_output",), "ffn gate + up": ("ffn_gate", "ffn_up"), "ffn down": ("ffn_down",)}


@pytest.mark.parametrize("arch", ["qwen35", "qwen3"])
def test_bench_matmuls(models, arch):
    """`bench --matmuls R`: a decode step's matrix products alone between read-bandwidth samples.
    The bytes of each part are recomputed from the GGUF tensor table (a qwen35 layer's gated q
    projection is attn_q, a GDN layer's z projection attn_gate); the shares are positive,
    ordered and split into the rounds above / at or below the median sample."""
    path = models[arch]
    rounds = 3
    j = json.loads(run("bench", "-m", path, "-t", 2, "--matmuls", rounds, "--membw-sample-mib", 16,
                       "--json").stdout)
    rd = GGUFReader(str(path))
    n_layer = kv_int(rd, f"{arch}.block_count") - (kv_int(rd, f"{arch}.nextn_predict_layers") or 0)
    want = {}
    for x in rd.tensors:
        m = re.match(r"blk\.(\d+)\.(\w+)\.weight$", x.name)
        if m and int(m.group(1)) < n_layer:
            for part, names in MM_PARTS.items():
                if m.group(2) in names:
                    want[part] = want.get(part, 0) + int(x.n_bytes)
    t = {x.name: x for x in rd.tensors}
    want["lm head"] = int(t.get("output.weight", t["token_embd.weight"]).n_bytes)
    got = {p["part"]: p["bytes"] for p in j["parts"]}
    assert got == want
    assert j["bytes_per_step"] == sum(want.values())
    assert (arch == "qwen35") == ("gdn out" in got)
    assert j["rounds"] == rounds and j["threads"] == 2 and j["sample_mib"] == 16
    assert j["sample_loads"] in ("generic", "avx2", "avx512")
    q = j["matmul_bw_pct"]
    assert 0 < q["q1"] <= q["median"] <= q["q3"], q
    assert all(p["bw_pct_median"] > 0 for p in j["parts"])
    up, lo = j["matmul_bw_pct_upper_half"], j["matmul_bw_pct_lower_half"]
    assert up["rounds"] + lo["rounds"] == rounds and lo["rounds"] >= 1
    assert j["matmul_gbs_median"] > 0 and j["samples_gbs_median"] > 0
    human = run("bench", "-m", path, "-t", 1, "--matmuls", 1, "--membw-sample-mib", 16).stdout
    assert "decode matrix products alone" in human and "lm head" in human
    r = run("bench", "-m", path, "--matmuls", 0, check=False)
    assert r.returncode == 2 and "--matmuls" in r.stderr
    for opt in (["--no-membw"], ["--membw-gbs", 10]):
        r = run("bench", "-m", path, "--matmuls", 1, *opt, check=False)
        assert r.returncode == 2 and "does not take" in r.stderr, r.stderr
    # -p 0 -n 0 is fine with --matmuls (it measures neither)
    assert "lm head" in run("bench", "-m", path, "-p", 0, "-n", 0, "-t", 1, "--matmuls", 1,
                            "--membw-sample-mib", 16).stdout
