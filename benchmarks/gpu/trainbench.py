#!/usr/bin/env python3
"""verify.sh's training comparisons (steps device, gpt, strategies): gdist's
`train -device cuda -json` summary against the PyTorch peer's JSON line
(benchmarks/peers/torch_gpu_train.py) on the same model, batch and
precision, with the model FLOPs utilisation of both; and the device
profile (gpu/devmodel, GDIST_DEVICE_PROFILE) in one line.

    trainbench.py compare GDIST_OUT TORCH_OUT --precision P --gpu NAME [--variant V] --results R.jsonl --table T.txt [--dry]
    trainbench.py variant NAME VAR_OUT BASE_OUT FP32_OUT --tol T --results R.jsonl --table T.txt [--dry]
    trainbench.py profile PROFILE.json --precision P [--audit AUDIT.md --gpu NAME --table T.txt] --results R.jsonl
    trainbench.py gemmbench BENCH.txt --results R.jsonl --table T.txt [--dry]
    trainbench.py ncu NCU.csv --txt NCU.txt --precision P --results R.jsonl
    trainbench.py ncuskip AUDIT.md MODEL BATCH PRECISION COUNT
    trainbench.py same CHECK A_OUT B_OUT --tol T [--expect K=V|K>V ...] [--metrics M,...] --results R.jsonl --table T.txt [--dry]

Rates are per step's median on both sides: gdist's global_batch x T /
step_ms_p50 (its summary's tokens_per_sec, the mean over every step
warm-up included, is reported beside it), the peer's median after its
warm-up steps. ratio = gdist / torch (above 1: gdist is faster).

MFU (gpt only) = tokens/s x FLOPs per token / the GPU's peak, FLOPs per
token = 6 N + 12 L D T (PaLM, Chowdhery et al. 2022, appendix B: the
matrix products of forward and backward, attention's scores and weighted
sums counted in full although causal), N the parameters less the token
and position embedding tables (lookups, not products). Peaks, dense
TFLOP/s for fp32 (CUDA cores), tf32 and bf16 (tensor cores), from NVIDIA's
H100 Tensor Core GPU Architecture whitepaper and the H100/H200 datasheets
(H200: the H100 SXM's compute): see PEAKS. An unknown GPU gets no MFU.

same (step strategies) compares two train runs' last summaries: the same
steps, and each metric of A within T of B's, relative, as cmd/train's
device tests compare them (|a - b| <= T max(1e-3, |b|)); --expect checks
A's own fields (strategy=zero3, overlap=true, buckets>1, resumed_step=10,
syncbn_ms_per_step<0.001).

The profile's line gives each kind's share of the step and, for a gpt's
linear and attention kinds, the TFLOP/s they reached (kind_flops); with
--audit (gpu/kernels' TestAudit tables, GDIST_KERNEL_AUDIT) each kind's
measured time beside the audit's prediction for the same model, batch and
precision: the ideal time of its kernels at their SMs (bytes at the
memory bandwidth, scaled from the audit's H100 SXM 3.35 TB/s to the GPU's
where --gpu names another) plus its products at the precision's peak.

variant (step gpt) checks a bf16 run with another choice
(GDIST_BF16_CAST=cublas, GDIST_AUTOCAST_CACHE=0, GDIST_ATTENTION_HEADS=copy)
against the default's run: train and eval loss within --tol relative of the default's,
and no farther from the fp32 run's than twice the default's distance
plus --tol/2 (a cast that reads the wrong operand or layout moves the
loss far more); its median step, rate and peak memory beside the
default's.

gemmbench (step bf16bench) summarises gpu/gemm's BenchmarkBF16Step
output (go test -bench's lines; -test.count N: the median of N): TFLOP/s
and cast GB/s of a GPT-2-small layer's products per way of computing
them (fp32; bf16 with the cast kernel, with and without the weight cache;
rounded inside cuBLAS).
"""
import argparse
import csv
import io
import json
import os
import re
import statistics
import sys

# (a substring of nvidia-smi's name, first match wins) -> dense TFLOP/s.
PEAKS = [
    ("H100 PCIe", {"fp32": 51.2, "tf32": 378.0, "bf16": 756.0}),
    ("H100 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5}),
    ("H200 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5}),
    ("H100", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4}),  # SXM5 (e.g. "NVIDIA H100 80GB HBM3")
    ("H200", {"fp32": 66.9, "tf32": 494.7, "bf16": 989.4}),  # SXM
]

GPT_RE = re.compile(r"^gpt-L(\d+)-D(\d+)-H(\d+)-T(\d+)$")
PRESETS = {"gpt": (4, 160, 4, 64), "gpt-large": (8, 256, 8, 128)}


def peak_tflops(gpu, precision):
    for key, p in PEAKS:
        if key in gpu:
            return p.get(precision)
    return None


def gpt_shape(model):
    if model in PRESETS:
        return PRESETS[model]
    m = GPT_RE.match(model)
    return tuple(int(v) for v in m.groups()) if m else None


def flops_per_token(model, params):
    """6 N + 12 L D T, N without the embedding tables (None: not a gpt)."""
    g = gpt_shape(model)
    if not g or not params:
        return None
    layers, d, _, t = g
    n = params - 256 * d - t * d
    return 6 * n + 12 * layers * d * t


def last_json(path, want=None):
    """The last JSON object line of a file (with key want, if given)."""
    r = None
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        o = json.loads(line)
                    except ValueError:
                        continue
                    if want is None or want in o:
                        r = o
    except OSError:
        return None
    return r


def gb(v):
    return "%.2f GB" % (v / 1e9) if v else "-"


def prec_label(a):
    """The precision as the tables show it: bf16+cublas for a variant."""
    return a.precision + ("+" + a.variant if getattr(a, "variant", None) else "")


def compare(a):
    g = last_json(a.gdist, "eval_loss")
    t = last_json(a.torch, "peer")
    if not g or not t:
        print("no %s output (gdist summary %s, torch line %s)" % ("gdist" if not g else "torch", bool(g), bool(t)))
        return 1
    model, batch = g["model"], g["global_batch"]
    shape = gpt_shape(model)
    per = shape[3] if shape else 1
    unit = "tok/s" if shape else "samples/s"
    g_ms = g.get("step_ms_p50") or 0
    g_rate = batch * per / (g_ms / 1e3) if g_ms else 0
    t_rate = t["tokens_per_sec"] if shape else t["samples_per_sec"]
    ratio = g_rate / t_rate if t_rate else None
    fpt = flops_per_token(model, g.get("num_params"))
    peak = peak_tflops(a.gpu, a.precision)
    mfu = lambda rate: rate * fpt / (peak * 1e12) if fpt and peak and not a.dry else None  # noqa: E731
    problems = []
    if g.get("num_params") != t.get("params"):
        problems.append("parameters: gdist %s, torch %s" % (g.get("num_params"), t.get("params")))
    gp = g.get("precision")
    if gp and gp != a.precision:
        problems.append("gdist trained at %s, not %s" % (gp, a.precision))
    if t.get("precision") != a.precision or t.get("batch") != batch or t.get("model") != model:
        problems.append("torch ran %s batch %s at %s" % (t.get("model"), t.get("batch"), t.get("precision")))
    row = {
        "bench": "train", "model": model, "batch": batch, "precision": a.precision, "variant": a.variant or None, "gpu": a.gpu, "dry": a.dry,
        "unit": unit, "gdist_rate": g_rate, "gdist_mean_rate": g.get("tokens_per_sec") if shape else g.get("samples_per_sec"),
        "torch_rate": t_rate, "ratio": ratio, "gdist_step_ms": g_ms, "torch_step_ms": t.get("step_ms_p50"),
        "gdist_steps": g.get("steps"), "torch_steps": t.get("steps"), "torch_attn": t.get("attn"),
        "gdist_peak_device_bytes": g.get("peak_device_bytes"), "torch_peak_bytes": t.get("peak_memory_bytes"),
        "params": g.get("num_params"), "torch_params": t.get("params"),
        "flops_per_token": fpt, "peak_tflops": peak, "gdist_mfu": mfu(g_rate), "torch_mfu": mfu(t_rate),
        "torch_device": t.get("device"), "torch_version": t.get("torch"), "problems": problems,
        "torch_profile_top": t.get("profile_top"),
    }
    with open(a.results, "a") as f:
        f.write(json.dumps(row) + "\n")
    new = not os.path.exists(a.table)
    with open(a.table, "a") as f:
        if new:
            f.write("%-24s %5s %-14s %12s %12s %8s %9s %9s %10s %10s %7s %7s\n" % (
                "model", "batch", "prec", "gdist", "torch", "gd/torch", "gdist ms", "torch ms", "gdist mem", "torch mem", "gd MFU", "to MFU"))
        pct = lambda v: "%6.1f%%" % (100 * v) if v is not None else "      -"  # noqa: E731
        f.write("%-24s %5d %-14s %12.1f %12.1f %8s %9.2f %9.2f %10s %10s %7s %7s %s%s\n" % (
            model, batch, prec_label(a), g_rate, t_rate, "%.2fx" % ratio if ratio else "-", g_ms, t.get("step_ms_p50") or 0,
            gb(g.get("peak_device_bytes")), gb(t.get("peak_memory_bytes")), pct(row["gdist_mfu"]), pct(row["torch_mfu"]),
            unit, " (dry: the fake against torch on the CPU)" if a.dry else ""))
    mf = lambda v: ", MFU %.1f%%" % (100 * v) if v is not None else ""  # noqa: E731
    print("%s b%d %s: gdist %.0f %s (%.1f ms/step%s, peak %s), torch %.0f (%.1f ms%s, %s): %s%s" % (
        model, batch, prec_label(a), g_rate, unit, g_ms, mf(row["gdist_mfu"]), gb(g.get("peak_device_bytes")),
        t_rate, t.get("step_ms_p50") or 0, mf(row["torch_mfu"]), gb(t.get("peak_memory_bytes")),
        "%.2fx" % ratio if ratio else "no ratio", "; MISMATCH: " + "; ".join(problems) if problems else ""))
    return 1 if problems or not g_rate or not t_rate else 0


def kind_flops(model, batch):
    """A gpt step's matrix-product FLOPs (forward and backward: 3 x the
    forward's) in the profile's kinds linear (the MLPs, the head and
    attention's qkv and output projections) and attention (its scores and
    weighted sums, counted in full although causal), or {} for other
    models."""
    g = gpt_shape(model)
    if not g:
        return {}
    layers, d, _, t = g
    rows = batch * t
    lin = layers * 2 * rows * (d * 4 * d + 4 * d * d + d * 3 * d + d * d) + 2 * rows * d * 256
    att = layers * 4 * batch * t * t * d
    return {"linear": 3 * lin, "attention": 3 * att}


# Memory bandwidth (bytes/s) by nvidia-smi's name, first match wins: the
# audit's kernel times scale from its H100 SXM to the GPU's.
BANDWIDTH = [("H100 PCIe", 2.0e12), ("H100 NVL", 3.9e12), ("H200", 4.8e12), ("H100", 3.35e12)]


def parse_audit(path, model, batch):
    """gpu/kernels' audit (TestAudit's markdown, GDIST_KERNEL_AUDIT): the
    per-kind table of model at batch ({kind: {column: ms}}, "total"
    included) and the bandwidth its kernel times assume, or (None, why)."""
    try:
        text = open(path).read()
    except OSError as e:
        return None, "no audit: %s" % e
    bw = re.search(r"kernels at ([0-9.]+) TB/s", text)
    for sec in text.split("\n### ")[0:]:
        body = sec.split("\n", 1)[1] if "\n" in sec else ""
        head = next((l for l in body.splitlines() if l.strip()), "")
        if not head.startswith("%s, batch %d:" % (model, batch)):
            continue
        kinds, on = {}, False
        for line in body.splitlines():
            if line.startswith("| kind | kernels fwd"):
                on = True
                continue
            if on and line.startswith("|---"):
                continue
            if on and line.startswith("|"):
                c = [x.strip() for x in line.strip("|").split("|")]
                try:
                    f32f, b16f = (float(v) for v in c[4].split("/"))
                    f32b, b16b = (float(v) for v in c[5].split("/"))
                    kinds[c[0]] = {"kernels_fwd": float(c[1]), "kernels_bwd": float(c[2]), "kernels_at_sms": float(c[3]),
                                   "products_fp32": f32f + f32b, "products_bf16": b16f + b16b}
                except (ValueError, IndexError):
                    return None, "audit table row not understood: %r" % line
            elif on:
                break
        if kinds:
            return {"kinds": kinds, "bandwidth": float(bw.group(1)) * 1e12 if bw else 3.35e12}, ""
    return None, "the audit has no table for %s at batch %d" % (model, batch)


def audit_vs(p, a):
    """Each profiled kind beside the audit's prediction: (rows, line) or
    ([], why not)."""
    aud, why = parse_audit(a.audit, p["model"], p["batch"])
    if not aud:
        return [], why
    if a.precision not in ("fp32", "bf16"):
        return [], "the audit predicts fp32 and bf16 products, not %s" % a.precision
    bw = next((b for k, b in BANDWIDTH if k in (a.gpu or "")), aud["bandwidth"])
    scale = aud["bandwidth"] / bw
    rows = []
    for k in p["kinds"] + [{"kind": "total", "forward_ms": None, "backward_ms": None, "total_ms": p["step_ms"]}]:
        pr = aud["kinds"].get(k["kind"])
        if not pr:
            rows.append({"kind": k["kind"], "measured_ms": k["total_ms"], "predicted_ms": None})
            continue
        kern, prod = pr["kernels_at_sms"] * scale, pr["products_" + a.precision]
        rows.append({"kind": k["kind"], "measured_ms": k["total_ms"], "forward_ms": k.get("forward_ms"), "backward_ms": k.get("backward_ms"),
                     "predicted_ms": kern + prod, "predicted_kernels_ms": kern, "predicted_products_ms": prod,
                     "ratio": k["total_ms"] / (kern + prod) if kern + prod > 0 else None})
    how = "kernels at their SMs at %.2f TB/s%s + products at %s's peak" % (
        bw / 1e12, "" if scale == 1 else " (the audit's %.2f scaled)" % (aud["bandwidth"] / 1e12), a.precision)
    if a.table:
        new = not os.path.exists(a.table)
        with open(a.table, "a") as f:
            if not new:
                f.write("\n")
            f.write("%s batch %d %s on %s: device time per step by kind (ms), measured (GDIST_DEVICE_PROFILE, %d steps) and the\n"
                    "audit's ideal (gpu/kernels TestAudit: %s)\n" % (p["model"], p["batch"], a.precision, a.gpu or "?", p["steps"], how))
            f.write("%-11s %9s %9s %9s %10s %9s %9s %9s\n" % ("kind", "measured", "fwd", "bwd", "predicted", "kernels", "products", "meas/pred"))
            for r in rows:
                num = lambda v, w=9: ("%" + str(w) + ".2f") % v if v is not None else "%*s" % (w, "-")  # noqa: E731
                f.write("%-11s %s %s %s %s %s %s %9s\n" % (r["kind"], num(r["measured_ms"]), num(r.get("forward_ms")), num(r.get("backward_ms")),
                                                        num(r["predicted_ms"], 10), num(r.get("predicted_kernels_ms")),
                                                        num(r.get("predicted_products_ms")), "%.1fx" % r["ratio"] if r.get("ratio") else "-"))
    line = "measured/audit: " + ", ".join("%s %.1fx" % (r["kind"], r["ratio"]) for r in rows if r.get("ratio") and (r["kind"] == "total" or r["measured_ms"] >= 0.005 * p["step_ms"]))
    return rows, line


def profile(a):
    try:
        with open(a.profile) as f:
            p = json.load(f)
    except (OSError, ValueError) as e:
        print("no device profile: %s" % e)
        return 1
    fl = kind_flops(p["model"], p["batch"])
    for k in p["kinds"]:
        if k["kind"] in fl and k["total_ms"] > 0:
            k["tflops"] = fl[k["kind"]] / (k["total_ms"] / 1e3) / 1e12
    kinds = ", ".join("%s %.0f%%%s" % (k["kind"], 100 * k["share"], " (%.1f TFLOP/s)" % k["tflops"] if "tflops" in k else "")
                      for k in p["kinds"] if k["share"] >= 0.005)
    vs, line = audit_vs(p, a) if a.audit else ([], "")
    with open(a.results, "a") as f:
        f.write(json.dumps({"bench": "profile", "precision": a.precision, **p, "audit": vs or None, "audit_note": line if not vs else None}) + "\n")
    print("profile %s %s: %.1f ms/step (%d steps): %s%s" % (p["model"], a.precision, p["step_ms"], p["steps"], kinds, "; " + line if line else ""))
    return 0 if p["steps"] > 0 else 1


def variant(a):
    """A bf16 cast choice's run against the default cast's and fp32's."""
    v, b, f = last_json(a.var, "eval_loss"), last_json(a.base, "eval_loss"), last_json(a.fp32, "eval_loss")
    problems, rel = [], {}
    if not v or not b:
        print("%s: no summary from %s" % (a.name, " and ".join(n for n, s in ((a.name, v), ("the default cast", b)) if not s)))
        return 1
    if v.get("steps") != b.get("steps"):
        problems.append("steps %s vs %s" % (v.get("steps"), b.get("steps")))
    far = []
    for m in ("train_loss", "eval_loss"):
        x, y = v.get(m), b.get(m)
        if not isinstance(x, (int, float)) or not isinstance(y, (int, float)) or x != x:
            problems.append("%s %s vs %s" % (m, x, y))
            continue
        rel[m] = abs(x - y) / max(1e-3, abs(y))
        if not rel[m] <= a.tol:
            problems.append("%s %.6g vs the default cast's %.6g (rel %.2g > %g)" % (m, x, y, rel[m], a.tol))
        if f and isinstance(f.get(m), (int, float)):
            dv, db = abs(x - f[m]) / max(1e-3, abs(f[m])), abs(y - f[m]) / max(1e-3, abs(f[m]))
            far.append("%s %.2g vs %.2g" % (m, dv, db))
            if not dv <= 2 * db + a.tol / 2:
                problems.append("%s %.2g from fp32's, the default cast %.2g (want <= 2x + %g)" % (m, dv, db, a.tol / 2))
    vm, bm = v.get("step_ms_p50") or 0, b.get("step_ms_p50") or 0
    row = {"bench": "bf16variant", "variant": a.name, "ok": not problems, "tol": a.tol, "dry": a.dry, "model": v.get("model"),
           "batch": v.get("global_batch"), "steps": v.get("steps"), "rel_diff": rel,
           "train_loss": [v.get("train_loss"), b.get("train_loss"), f.get("train_loss") if f else None],
           "eval_loss": [v.get("eval_loss"), b.get("eval_loss"), f.get("eval_loss") if f else None],
           "step_ms_p50": [vm, bm], "speedup": bm / vm if vm else None,
           "peak_device_bytes": [v.get("peak_device_bytes"), b.get("peak_device_bytes")], "problems": problems}
    with open(a.results, "a") as fo:
        fo.write(json.dumps(row) + "\n")
    line = "%s vs the default cast: train_loss %.6g vs %.6g, eval_loss %.6g vs %.6g (rel %s)%s; step %.2f vs %.2f ms (%s), peak %s vs %s" % (
        a.name, v.get("train_loss"), b.get("train_loss"), v.get("eval_loss"), b.get("eval_loss"),
        ", ".join("%s %.2g" % kv for kv in rel.items()), "; from fp32 (it vs default): " + ", ".join(far) if far else "",
        vm, bm, "%.3fx the default's speed" % (bm / vm) if vm else "-", gb(v.get("peak_device_bytes")), gb(b.get("peak_device_bytes")))
    with open(a.table, "a") as fo:
        fo.write("%-4s %s%s\n" % ("ok" if not problems else "FAIL", line, "; " + "; ".join(problems) if problems else ""))
    print("%s: %s" % ("ok" if not problems else "MISMATCH", line) + "; ".join([""] + problems))
    return 1 if problems else 0


def ncuskip(a):
    """How many launches ncu should skip to centre NCU_COUNT kernels on
    the second training step's forward/backward boundary, from the
    audit's launches (kernels and products, a product one launch; bf16:
    one cast more per product, an estimate): printed, or nothing."""
    try:
        text = open(a.audit).read()
    except OSError:
        return 1
    for sec in text.split("### ")[1:]:
        lines = sec.splitlines()
        head = next((l for l in lines[1:] if l.strip()), "")
        if not head.startswith("%s, batch %d:" % (a.model, a.batch)):
            continue
        n = {"fwd": 0, "bwd": 0, "gfwd": 0, "gbwd": 0}
        for line in lines:
            c = [x.strip() for x in line.strip().strip("|").split("|")]
            if len(c) >= 9 and c[1] in ("fwd", "bwd") and c[4].isdigit():
                n[c[1]] += int(c[4])
                if c[2].startswith("gemm"):
                    n["g" + c[1]] += int(c[4])
        if not n["fwd"]:
            return 1
        extra = a.precision == "bf16"
        step = n["fwd"] + n["bwd"] + extra * (n["gfwd"] + n["gbwd"])
        fwd = n["fwd"] + extra * n["gfwd"]
        print(max(0, step + fwd - a.count // 2))
        return 0
    return 1


BENCH_RE = re.compile(r"^Benchmark(\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$")


def gemmbench(a):
    """go test -bench BF16Step's lines: the median of each row's repeats."""
    runs = {}
    failed = False
    for line in open(a.bench, errors="replace"):
        failed |= line.startswith("--- FAIL") or line.startswith("FAIL")
        m = BENCH_RE.match(line.strip())
        if not m:
            continue
        vals = dict((u, float(v)) for v, u in re.findall(r"([0-9.e+-]+) (\S+)", m.group(3)))
        parts = m.group(1).split("/")
        if len(parts) < 3 or "ns/op" not in vals:
            continue
        runs.setdefault((parts[1], parts[2]), []).append(vals)
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    rows = []
    for (part, way), vs in runs.items():
        rows.append({"bench": "bf16step", "part": part, "way": way, "dry": a.dry, "repeats": len(vs),
                     "ms": med([v["ns/op"] / 1e6 for v in vs]), "tflops": med([v.get("TFLOP/s", 0) for v in vs]),
                     "cast_gbs": med([v.get("castGB/s", 0) for v in vs])})
    base = {r["part"]: r["ms"] for r in rows if r["way"] == "fp32"}
    with open(a.results, "a") as fo, open(a.table, "w") as ft:
        ft.write("BenchmarkBF16Step (gpu/gemm): a GPT-2-small layer's products a step, medians%s\n" % (" (dry: the fake, tiny sizes)" if a.dry else ""))
        ft.write("%-10s %-22s %10s %10s %11s %9s\n" % ("part", "way", "ms", "TFLOP/s", "cast GB/s", "vs fp32"))
        for r in rows:
            r["vs_fp32"] = base[r["part"]] / r["ms"] if base.get(r["part"]) and r["ms"] else None
            fo.write(json.dumps(r) + "\n")
            ft.write("%-10s %-22s %10.3f %10.1f %11.1f %9s\n" % (r["part"], r["way"], r["ms"], r["tflops"], r["cast_gbs"],
                                                             "%.2fx" % r["vs_fp32"] if r["vs_fp32"] else "-"))
    by = {}
    for r in rows:
        by.setdefault(r["part"], []).append("%s %.1f" % (r["way"], r["tflops"]))
    print("; ".join("%s: %s TFLOP/s" % (k, ", ".join(v)) for k, v in by.items()) or "no benchmark rows", end="")
    print("; FAILED" if failed else "")
    return 1 if failed or not rows else 0


def ncu(a):
    """Nsight Compute's CSV (--csv --print-units base, SpeedOfLight) summed
    by kernel: calls, time, mean compute (SM) and memory throughput (% of
    the GPU's peak), most time first."""
    lines = [l for l in open(a.csv, errors="replace") if l.startswith('"')]
    k = {}
    for r in csv.DictReader(io.StringIO("".join(lines))):
        name = re.sub(r"[(<].*", "", r.get("Kernel Name") or r.get("Function Name") or "?").strip()[:60]
        m, u = r.get("Metric Name", ""), r.get("Metric Unit", "")
        try:
            v = float((r.get("Metric Value") or "").replace(",", ""))
        except ValueError:
            continue
        d = k.setdefault((r.get("ID"), name), {})
        if m == "Duration":
            d["us"] = v / 1e3 if u in ("ns", "nsecond") else v * 1e3 if u in ("ms", "msecond") else v / 1e-6 if u in ("s", "second") else v
        elif m.startswith("Compute (SM) Throughput"):
            d["sm"] = v
        elif m == "Memory Throughput" and u == "%":
            d["mem"] = v
    by = {}
    for (_, name), d in k.items():
        b = by.setdefault(name, {"n": 0, "us": 0.0, "sm": 0.0, "mem": 0.0})
        b["n"] += 1
        for f in ("us", "sm", "mem"):
            b[f] += d.get(f, 0)
    rows = sorted(by.items(), key=lambda kv: -kv[1]["us"])
    tot = sum(b["us"] for _, b in rows) or 1
    with open(a.txt, "w") as f, open(a.results, "a") as js:
        f.write("%-60s %5s %10s %6s %7s %7s\n" % ("kernel", "calls", "us", "share", "SM %", "mem %"))
        for name, b in rows:
            f.write("%-60s %5d %10.1f %5.1f%% %6.1f%% %6.1f%%\n" % (name, b["n"], b["us"], 100 * b["us"] / tot, b["sm"] / b["n"], b["mem"] / b["n"]))
            js.write(json.dumps({"bench": "ncu", "precision": a.precision, "kernel": name, "calls": b["n"], "us": b["us"],
                                 "sm_pct": b["sm"] / b["n"], "mem_pct": b["mem"] / b["n"]}) + "\n")
    print("%d kernels profiled (%s), by time: %s" % (len(k), a.precision, "; ".join(
        "%s %.0f%% (SM %.0f%%, mem %.0f%%)" % (n, 100 * b["us"] / tot, b["sm"] / b["n"], b["mem"] / b["n"]) for n, b in rows[:4])))
    return 0 if k else 1


METRICS = "eval_loss,train_loss,test_accuracy,grad_norm_p50"


def expect_ok(s, e):
    """Whether summary s meets e: K=V (V as JSON's text: true, 2, cuda:0),
    K>V or K<V (numbers; for K<V a missing K is 0: train's omitempty
    fields, syncbn_ms_per_step)."""
    if "<" in e:
        k, v = e.split("<", 1)
        got = s.get(k, 0)
        return isinstance(got, (int, float)) and got < float(v)
    if ">" in e:
        k, v = e.split(">", 1)
        return isinstance(s.get(k), (int, float)) and s[k] > float(v)
    k, v = e.split("=", 1)
    got = s.get(k)
    return (json.dumps(got) if not isinstance(got, str) else got) == v


def same(a):
    """Two train runs (their -json output) against each other: A's
    metrics within --tol of B's (relative, with a floor of 1e-3 as in
    cmd/train's near), the same steps, A's --expect fields; a line, a row
    in --results and one in --table."""
    x, y = last_json(a.a, "eval_loss"), last_json(a.b, "eval_loss")
    problems, diffs = [], {}
    if not x or not y:
        problems.append("no summary from %s" % " and ".join(n for n, s in (("A", x), ("B", y)) if not s))
    else:
        if x.get("steps") != y.get("steps"):
            problems.append("steps %s vs %s" % (x.get("steps"), y.get("steps")))
        for m in a.metrics.split(","):
            u, v = x.get(m), y.get(m)
            if u is None and v is None:
                continue
            if not isinstance(u, (int, float)) or not isinstance(v, (int, float)):
                problems.append("%s %s vs %s" % (m, u, v))
                continue
            diffs[m] = abs(u - v) / max(1e-3, abs(v))
            if not diffs[m] <= a.tol:
                problems.append("%s %.9g vs %.9g (rel %.2g > %g)" % (m, u, v, diffs[m], a.tol))
        for e in a.expect or []:
            if not expect_ok(x, e):
                k = re.split("[=<>]", e, 1)[0]
                problems.append("A's %s is %s, want %s" % (k, json.dumps(x.get(k)), e))
    worst = max(diffs, key=diffs.get) if diffs else None
    g = lambda s, k: s.get(k) if s else None  # noqa: E731
    row = {"bench": "strategies", "check": a.check, "ok": not problems, "tol": a.tol, "dry": a.dry,
           "eval_loss_a": g(x, "eval_loss"), "eval_loss_b": g(y, "eval_loss"), "rel_diff": diffs, "steps": g(x, "steps"),
           "a": {k: g(x, k) for k in ("strategy", "backend", "world_size", "device", "global_batch", "overlap", "buckets",
                                       "resumed_step", "peak_device_bytes", "samples_per_sec", "syncbn", "syncbn_ms_per_step")},
           "b": {k: g(y, k) for k in ("strategy", "backend", "world_size", "device", "global_batch", "resumed_step", "syncbn", "syncbn_ms_per_step")},
           "problems": problems}
    with open(a.results, "a") as f:
        f.write(json.dumps(row) + "\n")
    line = "%-4s %-34s eval_loss %s vs %s, %s steps, worst rel diff %s" % (
        "ok" if not problems else "FAIL", a.check, "%.9g" % row["eval_loss_a"] if x else "-", "%.9g" % row["eval_loss_b"] if y else "-",
        row["steps"], "%.2g (%s)" % (diffs[worst], worst) if worst else "-")
    with open(a.table, "a") as f:
        f.write(line + ("; " + "; ".join(problems) if problems else "") + "\n")
    print("%s: %s%s" % (a.check, "ok" if not problems else "MISMATCH",
                        " (eval %.2g)" % diffs["eval_loss"] if "eval_loss" in diffs else "") + ("; ".join([""] + problems)))
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser(description="verify.sh's training comparisons")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("gdist")
    c.add_argument("torch")
    c.add_argument("--precision", default="fp32")
    c.add_argument("--gpu", default="")
    c.add_argument("--results", required=True)
    c.add_argument("--table", required=True)
    c.add_argument("--dry", action="store_true")
    c.add_argument("--variant", default="", help="the bf16 choice the gdist run used (cublas, nocache, headscopy)")
    v = sub.add_parser("variant")
    v.add_argument("name")
    v.add_argument("var")
    v.add_argument("base")
    v.add_argument("fp32")
    v.add_argument("--tol", type=float, required=True)
    v.add_argument("--results", required=True)
    v.add_argument("--table", required=True)
    v.add_argument("--dry", action="store_true")
    p = sub.add_parser("profile")
    p.add_argument("profile")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--audit", help="gpu/kernels' audit tables (GDIST_KERNEL_AUDIT): the prediction beside each kind")
    p.add_argument("--gpu", default="", help="nvidia-smi's name: the audit's kernel times scaled to its bandwidth")
    p.add_argument("--table", help="the measured-vs-predicted table, appended")
    p.add_argument("--results", required=True)
    ns = sub.add_parser("ncuskip")
    ns.add_argument("audit")
    ns.add_argument("model")
    ns.add_argument("batch", type=int)
    ns.add_argument("precision")
    ns.add_argument("count", type=int)
    gbn = sub.add_parser("gemmbench")
    gbn.add_argument("bench")
    gbn.add_argument("--results", required=True)
    gbn.add_argument("--table", required=True)
    gbn.add_argument("--dry", action="store_true")
    n = sub.add_parser("ncu")
    n.add_argument("csv")
    n.add_argument("--txt", required=True)
    n.add_argument("--precision", default="fp32")
    n.add_argument("--results", required=True)
    s = sub.add_parser("same")
    s.add_argument("check")
    s.add_argument("a")
    s.add_argument("b")
    s.add_argument("--tol", type=float, required=True)
    s.add_argument("--expect", action="append")
    s.add_argument("--metrics", default=METRICS)
    s.add_argument("--results", required=True)
    s.add_argument("--table", required=True)
    s.add_argument("--dry", action="store_true")
    a = ap.parse_args()
    return {"compare": compare, "variant": variant, "profile": profile, "gemmbench": gemmbench, "ncuskip": ncuskip, "ncu": ncu, "same": same}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
