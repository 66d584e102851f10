#!/usr/bin/env python3
"""Kazeia vs llama.cpp (llama-cpp-python) on the same GGUF files, same threads, same schedule.

For every model: `kazeia bench --json` (ours), then the same measurement with llama.cpp in a
separate Python process (so its peak RSS is its own): p random prompt tokens in one eval
(n_batch 512, logits of the last token only), then n single-token evals fed back greedily,
one warm-up run and R measured runs from an empty cache, medians. Decode is measured right after
the prompt (depth p) in both engines. Roofline: this host's read bandwidth drifts by tens of
percent within seconds, so each engine's decode is compared with read-bandwidth samples taken
between its own decode tokens (every --membw-every tokens, outside the timed decode) by the
same sampler (cli/bench/membw.c: kazeia bench itself, the llama.cpp worker through ctypes on
libkazeia_dev.so), with the same thread count; a run's share is its decode GB/s over the median of
its samples (weight bytes per token as kazeia counts them; same file, same bytes). The
standalone `kazeia bench --membw` at the start and end is printed for reference.

Models: presets generated with random weights by kz-mkmodel (cached in build/bench-models/), or
paths to existing .gguf files. Entry syntax: NAME[:P:N] to override -p/-n for that model.
Writes build/bench-results.json. Usually run through bench/compare.sh.
"""
import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# llama.cpp worker (runs in its own process)

def lcpp_worker(a):
    import numpy as np
    import llama_cpp

    kv = {"f16": llama_cpp.GGML_TYPE_F16, "f32": llama_cpp.GGML_TYPE_F32, "q8_0": llama_cpp.GGML_TYPE_Q8_0}[a.kv]
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=a.model, n_threads=a.t, n_threads_batch=a.t, n_batch=512, n_ubatch=512,
                          n_ctx=a.p + a.n + 16, logits_all=False, type_k=kv, type_v=kv,
                          flash_attn=a.flash_attn, verbose=False)
    load_s = time.perf_counter() - t0
    n_vocab = llm.n_vocab()
    rng = np.random.default_rng(a.seed)
    prompt = [int(x) for x in rng.integers(0, n_vocab, a.p)]

    def last_argmax():
        ptr = llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1)
        return int(np.ctypeslib.as_array(ptr, shape=(n_vocab,)).argmax())

    # the read-bandwidth sampler of kazeia bench (cli/bench/membw.c), from libkazeia_dev.so
    import ctypes
    kz = ctypes.CDLL(str(Path(a.build).resolve() / "libkazeia_dev.so"))
    kz.kz_membw_open.restype = ctypes.c_void_p
    kz.kz_membw_open.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
    kz.kz_membw_pass.restype = ctypes.c_double
    kz.kz_membw_pass.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    kz.kz_membw_close.argtypes = [ctypes.c_void_p]
    err = ctypes.create_string_buffer(256)
    bws = None
    if a.membw_every > 0 and a.n > 0 and a.wbytes > 0:
        bws = kz.kz_membw_open(a.t, a.membw_sample_mib, err, 256)
        if not bws:
            raise SystemExit(f"bandwidth sampler: {err.value.decode()}")

    def sample():
        g = kz.kz_membw_pass(bws, err, 256)
        if g <= 0:
            raise SystemExit(f"bandwidth sampler: {err.value.decode()}")
        return g

    pp, tg, eff, effm, samples = [], [], [], [], []
    for r in range(-a.warmup, a.r):
        llm.reset()
        llm._ctx.kv_cache_clear()  # fresh KV + recurrent state every run
        tok = int(rng.integers(0, n_vocab))
        t0 = time.perf_counter()
        if a.p:
            llm.eval(prompt)
            tok = last_argmax()
        t1 = time.perf_counter()
        dec_s, run_samples, seg_n = 0.0, [], 0
        if bws:
            run_samples.append(sample())
        seg_t0 = time.perf_counter()
        for i in range(a.n):
            llm.eval([tok])
            tok = last_argmax()
            seg_n += 1
            if bws and (seg_n == a.membw_every or i == a.n - 1):
                dec_s += time.perf_counter() - seg_t0
                run_samples.append(sample())
                seg_n = 0
                seg_t0 = time.perf_counter()
        t2 = time.perf_counter()
        if not bws:
            dec_s = t2 - t1
        if r >= 0:
            if a.p:
                pp.append(a.p / (t1 - t0))
            if a.n:
                tg.append(a.n / dec_s)
            if run_samples:
                import statistics
                samples += run_samples
                eff.append(100 * a.wbytes * a.n / dec_s / 1e9 / statistics.median(run_samples))
                effm.append(100 * a.wbytes * a.n / dec_s / 1e9 / statistics.fmean(run_samples))
    llm.close()
    if bws:
        kz.kz_membw_close(bws)
    out = {"version": getattr(llama_cpp, "__version__", "?"), "load_s": load_s, "n_vocab": n_vocab,
           "flash_attn": a.flash_attn,
           "system_info": llama_cpp.llama_print_system_info().decode().strip(),
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
    if pp:
        out["prefill_tok_s"] = stats(pp)
    if tg:
        out["decode_tok_s"] = stats(tg)
    if eff:
        out["decode_bw_pct_interleaved"] = stats(eff)
        out["decode_bw_pct_interleaved_vs_mean"] = stats(effm)
        out["membw_interleaved_gbs"] = stats(samples)
    print(json.dumps(out))


def stats(v):
    import statistics
    s = sorted(v)
    return {"median": statistics.median(s), "min": s[0], "max": s[-1], "mean": statistics.fmean(s),
            "stddev": statistics.stdev(s) if len(s) > 1 else 0.0, "runs": list(v)}


# ---------------------------------------------------------------------------------------------
# driver

def parse_entry(e, p, n):
    parts = e.split(":")
    if len(parts) == 3:
        return parts[0], int(parts[1]), int(parts[2])
    if len(parts) != 1:
        raise SystemExit(f"bad model entry '{e}' (expected NAME or NAME:P:N)")
    return e, p, n


def ensure_model(name, a):
    """Path of the GGUF for a preset (generated once) or an existing file."""
    if name.endswith(".gguf"):
        path = Path(name)
        if not path.is_file():
            raise SystemExit(f"model file {path} does not exist")
        return path
    arch = "qwen35" if name.startswith("qwen35") else "qwen3" if name.startswith("qwen3") else None
    if arch is None:
        raise SystemExit(f"unknown model '{name}' (a kz-mkmodel preset such as qwen35-0.8b, or a .gguf path)")
    path = Path(a.models_dir) / f"{name}-{a.type}.gguf"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".gguf.tmp")
    log(f"generating {path} (random weights, {a.type}) ...")
    t0 = time.time()
    r = subprocess.run([str(Path(a.build) / "kz-mkmodel"), "--arch", arch, "--preset", name, "--type", a.type,
                        "--threads", str(a.t), "-q", "-o", str(tmp)], capture_output=True, text=True)
    if r.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise SystemExit(f"kz-mkmodel failed for {name}: {r.stderr.strip()}")
    tmp.rename(path)
    log(f"  done in {time.time() - t0:.0f} s")
    return path


def kazeia(a, *args):
    cmd = [str(Path(a.build) / "kazeia"), "bench", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


def membw(a):
    return kazeia(a, "--membw", "-t", a.t, "--json")["membw_gbs"]


def run_llamacpp(a, path, p, n, wbytes):
    cmd = [sys.executable, __file__, "--lcpp-worker", "--model", str(path), "-p", str(p), "-n", str(n),
           "-t", str(a.t), "-r", str(a.r), "--warmup", str(a.warmup), "--kv", a.kv, "--seed", str(a.seed),
           "--build", str(a.build), "--wbytes", str(wbytes), "--membw-every", str(a.membw_every),
           "--membw-sample-mib", str(a.membw_sample_mib)]
    if a.flash_attn:
        cmd.append("--flash-attn")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"llama.cpp run on {path} failed: {r.stderr.strip()[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def bw_pct(e):
    """an engine's decode as % of the read bandwidth: against the samples between its tokens
    (median over runs) where there are some, else against the single measurement"""
    if "decode_bw_pct_interleaved" in e:
        return e["decode_bw_pct_interleaved"]["median"]
    return e.get("decode_bw_pct")


def fmt(x, w=9):
    return f"{x:{w}.2f}" if x is not None else " " * (w - 1) + "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="qwen35-0.8b,qwen35-4b:128:16",
                    help="comma list of presets or .gguf paths, each optionally NAME:P:N "
                         "(default: qwen35-0.8b,qwen35-4b:128:16)")
    ap.add_argument("-p", type=int, default=512, help="prefill tokens (default 512)")
    ap.add_argument("-n", type=int, default=128, help="decode tokens (default 128)")
    ap.add_argument("-t", type=int, default=os.cpu_count(), help="threads for both engines (default: all CPUs)")
    ap.add_argument("-r", type=int, default=3, help="measured runs (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="warm-up runs not counted (default 1)")
    ap.add_argument("--kv", default="f16", choices=["f16", "f32", "q8_0"], help="KV cache type for both (default f16)")
    ap.add_argument("--type", default="q4_0", help="weight type of generated models (default q4_0)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--flash-attn", action="store_true", help="llama.cpp: enable flash attention")
    ap.add_argument("--no-repack", action="store_true",
                    help="kazeia: keep Q4_0 weights zero-copy mmap (kazeia bench --no-repack; the default "
                         "repacks them at load into the 16-row layout where an AVX-512 VNNI kernel exists)")
    ap.add_argument("--both-layouts", "--repack-both", action="store_true", dest="both_layouts",
                    help="kazeia twice per model, default (repacked) layout before llama.cpp and the mmap "
                         "layout (--no-repack) after it, both against the same llama.cpp run "
                         "(table rows 'model' and 'model mmap')")
    ap.add_argument("--membw-gbs", type=float, default=0,
                    help="use this read bandwidth instead of measuring it (no samples between tokens)")
    ap.add_argument("--membw-every", type=int, default=16,
                    help="read-bandwidth sample every K decode tokens, both engines (default 16; 0 = off)")
    ap.add_argument("--membw-sample-mib", type=int, default=256, help="buffer of those samples (default 256 MiB)")
    ap.add_argument("--wbytes", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--engines", default="kazeia,llama.cpp", help="which engines to run (default both)")
    ap.add_argument("--build", default=os.environ.get("KZ_BUILD", "build"), help="kazeia build dir")
    ap.add_argument("--models-dir", default=str(REPO / "build" / "bench-models"))
    ap.add_argument("--out", default=str(REPO / "build" / "bench-results.json"))
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--lcpp-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.lcpp_worker:
        return lcpp_worker(a)

    engines = set(a.engines.split(","))
    if not engines <= {"kazeia", "llama.cpp"} or not engines:
        raise SystemExit("--engines takes kazeia, llama.cpp or both")
    if a.t < 1 or a.r < 1 or a.warmup < 0:
        raise SystemExit("-t and -r must be >= 1, --warmup >= 0")
    if not Path(a.build, "kazeia").is_file():
        raise SystemExit(f"{a.build}/kazeia not found (run make, or pass --build / KZ_BUILD)")
    if "llama.cpp" in engines:
        import llama_cpp  # noqa: F401  fail early with the real import error

    entries = [parse_entry(e, a.p, a.n) for e in a.models.split(",") if e]
    paths = [(e, ensure_model(e[0], a)) for e in entries]

    bw = a.membw_gbs
    bw_runs = []
    if bw <= 0:
        log(f"measuring memory read bandwidth ({a.t} threads) ...")
        bw_runs.append(membw(a))
        bw = bw_runs[0]
    # kazeia samples the bandwidth between its decode tokens (and measures it once more on its own,
    # printed and in its JSON's decode_bw_pct only; over the default 1 GiB buffer: a 256 MiB one
    # read 25 % fast on a host with a 260 MiB L3, its passes after the first partly cached); a
    # given --membw-gbs replaces all of that
    bw_args = (["--membw-gbs", bw] if a.membw_gbs > 0 else
               ["--membw-every", a.membw_every, "--membw-sample-mib", a.membw_sample_mib])
    res = {"machine": {"cpu": cpu_name(), "cpus": os.cpu_count(), "loadavg_start": os.getloadavg(),
                       "platform": platform.platform()},
           "threads": a.t, "runs": a.r, "warmup": a.warmup, "kv": a.kv, "membw_gbs": bw, "results": []}
    for (name, p, n), path in paths:
        label = Path(name).stem if name.endswith(".gguf") else name
        row = {"model": label, "path": str(path), "n_prompt": p, "n_gen": n}
        log(f"{name}: kazeia -p {p} -n {n} -t {a.t} -r {a.r} ...")
        t0 = time.time()
        # our bytes/token also serve llama.cpp's bandwidth figure, so always ask kazeia for them
        ours = kazeia(a, "-m", path, "-p", p, "-n", n, "-t", a.t, "-r", a.r if "kazeia" in engines else 1,
                      "--warmup", a.warmup if "kazeia" in engines else 0, "--kv", a.kv, "--seed", a.seed,
                      *bw_args, "--json", *(["--no-repack"] if a.no_repack else []))
        log(f"  {time.time() - t0:.0f} s")
        row["weight_bytes_per_token"] = ours["weight_bytes_per_token"]
        if "kazeia" in engines:
            row["kazeia"] = ours
        if "llama.cpp" in engines:
            log(f"{name}: llama.cpp ...")
            t0 = time.time()
            lc = run_llamacpp(a, path, p, n, ours["weight_bytes_per_token"] if a.membw_gbs <= 0 else 0)
            log(f"  {time.time() - t0:.0f} s")
            if "decode_tok_s" in lc:
                lc["decode_gbs"] = ours["weight_bytes_per_token"] * lc["decode_tok_s"]["median"] / 1e9
                lc["decode_bw_pct"] = 100 * lc["decode_gbs"] / bw
            row["llama.cpp"] = lc
        if a.both_layouts and "kazeia" in engines:
            log(f"{name}: kazeia --no-repack ...")
            t0 = time.time()
            row["kazeia-mmap"] = kazeia(a, "-m", path, "-p", p, "-n", n, "-t", a.t, "-r", a.r, "--warmup", a.warmup,
                                        "--kv", a.kv, "--seed", a.seed, *bw_args, "--json", "--no-repack")
            log(f"  {time.time() - t0:.0f} s")
        for k in ("prefill_tok_s", "decode_tok_s"):
            for eng, suffix in (("kazeia", ""), ("kazeia-mmap", "_mmap")):
                if eng in row and "llama.cpp" in row and k in row[eng] and k in row["llama.cpp"]:
                    row["ratio_" + k.split("_")[0] + suffix] = row[eng][k]["median"] / row["llama.cpp"][k]["median"]
        res["results"].append(row)
    if a.membw_gbs <= 0:
        bw_runs.append(membw(a))  # again at the end: shows how much the shared machine drifted
        res["membw_gbs_runs"] = bw_runs
    res["machine"]["loadavg_end"] = os.getloadavg()

    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(res, indent=1) + "\n")

    # table
    print(f"\n{res['machine']['cpu']}, {a.t} threads, KV {a.kv}, median of {a.r} runs (+{a.warmup} warm-up); "
          f"read bandwidth {bw:.1f} GB/s" + (f" (start/end {bw_runs[0]:.1f}/{bw_runs[-1]:.1f})" if len(bw_runs) > 1 else ""))
    if a.membw_gbs <= 0 and a.membw_every > 0:
        print(f"%bw: decode GB/s over the median of read-bandwidth samples taken every {a.membw_every} decode tokens "
              f"of the same run (median over runs); sample medians: " +
              ", ".join(f"{r['model']} {e} {r[e]['membw_interleaved_gbs']['median']:.1f}"
                        for r in res["results"] for e in ("kazeia", "llama.cpp", "kazeia-mmap")
                        if "membw_interleaved_gbs" in r.get(e, {})) + " GB/s")
    lc_ver = next((r["llama.cpp"]["version"] for r in res["results"] if "llama.cpp" in r), None)
    if lc_ver:
        print(f"llama-cpp-python {lc_ver}")
    w = max([14] + [len(r["model"]) + (5 if "kazeia-mmap" in r else 0) for r in res["results"]])
    print(f"| {'model':<{w}} | {'test':>6} | {'kazeia t/s':>10} | {'llama.cpp t/s':>13} | {'ours/llama':>10} | "
          f"{'ours %bw':>8} | {'llama %bw':>9} |")
    print(f"|{'-' * (w + 2)}|{'-' * 8}|{'-' * 12}|{'-' * 15}|{'-' * 12}|{'-' * 10}|{'-' * 11}|")
    for r in res["results"]:
        for k, test in (("prefill_tok_s", f"pp{r['n_prompt']}"), ("decode_tok_s", f"tg{r['n_gen']}")):
            for eng, suffix in (("kazeia", ""), ("kazeia-mmap", "_mmap")):
                if eng != "kazeia" and eng not in r:
                    continue
                o = r.get(eng, {}).get(k, {}).get("median")
                lc = r.get("llama.cpp", {}).get(k, {}).get("median")
                if o is None and lc is None:
                    continue
                ratio = r.get("ratio_" + k.split("_")[0] + suffix)
                bo = bw_pct(r.get(eng, {})) if k == "decode_tok_s" else None
                bl = bw_pct(r.get("llama.cpp", {})) if k == "decode_tok_s" else None
                label = r["model"] + (" mmap" if suffix else "")
                print(f"| {label:<{w}} | {test:>6} | {fmt(o, 10)} | {fmt(lc, 13)} | {fmt(ratio, 10)} | "
                      f"{fmt(bo, 8)} | {fmt(bl, 9)} |")
    vm = [(r["model"], e, r[e]["decode_bw_pct_interleaved_vs_mean"]["median"]) for r in res["results"]
          for e in ("kazeia", "llama.cpp", "kazeia-mmap") if "decode_bw_pct_interleaved_vs_mean" in r.get(e, {})]
    if vm:
        # the host's bandwidth comes in bursts of milliseconds: a median of a few samples catches or
        # misses them, the mean weighs them by how often they came
        print("%bw against the mean of each run's samples instead of their median: " +
              ", ".join(f"{m} {e} {x:.1f} %" for m, e, x in vm))
    print(f"(results: {a.out})")


if __name__ == "__main__":
    main()
