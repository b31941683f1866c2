#!/usr/bin/env python3
"""make_report.py — run records (profiles/<device>/*.json, schema v1) -> report/REPORT.md + figures.

    python report/make_report.py --profiles profiles --out report

Deterministic: the same records give byte-identical Markdown (everything sorted, fixed number
formats, no generation time) and, with the pinned matplotlib, identical PNGs. A record that cannot
be read is named with its problem in the report and skipped; records are grouped by device and no
figure mixes devices. Needs no GPU.

Exit codes: 0 report written (even with skipped records); 2 bad command line; 4 output not writable.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("MPLCONFIGDIR", os.path.join(HERE, ".cache", "matplotlib"))

import analysis as A  # noqa: E402
import figures as F  # noqa: E402
from records import as_list, dget, load_profiles, num  # noqa: E402

FIGURES = [
    (1, "linreg_ladder", "The linear-regression ladder (5M × 200 epochs)"),
    (2, "linreg_scaling", "Scaling with the number of points"),
    (3, "epoch_breakdown", "Where an epoch goes"),
    (4, "phase3_timeline", "Phase 3 timeline excerpt"),
    (5, "mlp_w1", "MLP W1: time per epoch and test accuracy"),
    (6, "mlp_w2_sweep", "MLP W2 width sweep"),
    (7, "loss_curves", "Loss curves, ours against the twin"),
    (8, "efficiency", "Efficiency against the measured peaks"),
    (9, "batch_sweep", "Phase 5 batch-size sweep"),
    (13, "gemm_ladder", "The GEMM ladder against cuBLASLt"),  # 10-12: where the time goes (ACCOUNT_FIG_FIRST)
]
PHASES = [(1, "phase1_naive"), (2, "phase2_shared_mem"), (3, "phase3_fused_streams"), (4, "phase4_mlp"),
          (5, "phase5_batched")]
DASH = "—"


# ------------------------------------------------------------------ formatting

def sig(x, digits=4):
    """Fixed significant digits, thousands separators, no exponent; None -> em dash."""
    if x is None:
        return DASH
    if x == 0:
        return "0"
    e = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - e)
    s = f"{round(x, decimals):,.{decimals}f}"
    return "0" if s in ("-0", "-0.0") else s


def count(x):
    """A call/byte count: integer with thousands separators."""
    return DASH if x is None else f"{int(round(x)):,}"


def ms(x):
    return DASH if x is None else sig(x) + " ms"


def times(x):
    return DASH if x is None else sig(x, 3) + "×"


def pct(x):
    return DASH if x is None else A.pct_text(x)


ROOF_RULE = ("A kernel or rung is given as a share of a roof only where that roof bounds it: one that moves its counted bytes "
             "faster than the measured HBM copy bandwidth keeps them on chip (registers, shared memory or L2), so it is "
             "given as a multiple of the HBM copy rate, never as a percentage over 100%.")


def roof_text(p, name):
    """A share of a roof that bounds it, '64.4% of copy bandwidth (k)'; over 100% the roof does not bound it:
    over the HBM copy roof 'on chip: 3.33× the HBM copy rate (k)', over another 'above the <roof>: 1.20× it'."""
    if p is None:
        return DASH
    if p <= 100:
        return f"{pct(p)} of {name}"
    if name.startswith(A.HBM_ROOF):
        return f"on chip: {times(p / 100)} the HBM copy rate{name[len(A.HBM_ROOF):]}"
    return f"above the {name}: {times(p / 100)} it"


COPY_RATE_RULE = ("A run that reads faster than the measured copy bandwidth is given as a multiple of that rate, never "
                  "as a percentage over 100%: the copy bandwidth counts bytes read and written, a training epoch "
                  "mostly reads, and where the points fit the L2 cache (n of a few million) the epochs after the first "
                  "read L2, not HBM.")


def copy_rate_text(p):
    """A linear-regression run's read rate against the copy bandwidth (analysis.copy_share): '64.4% of copy
    bandwidth', over 100% '1.02× the HBM copy rate' (COPY_RATE_RULE)."""
    if p is None:
        return DASH
    return f"{pct(p)} of copy bandwidth" if p <= 100 else f"{times(p / 100)} the HBM copy rate"


def esc(s):
    return str(s).replace("|", "\\|").replace("\n", " ")


def code(s):
    return "`" + str(s).replace("`", "'").replace("|", "\\|") + "`"


class Ctx:
    def __init__(self, out_dir):
        self.out_dir = os.path.abspath(out_dir)

    def rel(self, abspath):
        return os.path.relpath(abspath, self.out_dir).replace(os.sep, "/")

    def link(self, r):
        return f"[{code(r.file)}]({self.rel(r.abspath)})"

    def links(self, recs):
        seen, out = set(), []
        for r in recs:
            if r is not None and r.path not in seen:
                seen.add(r.path)
                out.append(self.link(r))
        return ", ".join(out) if out else DASH


def long_table(header, rows, what, limit=16):
    """A table; folded into <details> when longer than limit rows (GitHub renders both)."""
    t = table(header, rows)
    if len(rows) <= limit:
        return t
    return f"<details><summary>{what} ({len(rows)} rows)</summary>\n\n{t}\n\n</details>"


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    for row in rows:
        lines.append("| " + " | ".join(esc(c) if not isinstance(c, str) else c.replace("\n", " ") for c in row) + " |")
    return "\n".join(lines)


def version(v):
    if isinstance(v, bool) or v is None:
        return DASH
    if isinstance(v, int):
        return f"{v // 1000}.{(v % 1000) // 10}"
    return str(v)


# ------------------------------------------------------------------ drawing the figures
# The report's text is written first; the figures are drawn at the end, side by side in forked
# processes (NB_REPORT_JOBS, default min(8, CPUs); 1: one after another). Each figure function only
# reads its data and writes its PNG, so the bytes do not depend on the order or the process
# (test_report.py draws them both ways and compares). Layout and PNG encoding are most of the
# report's time (about 25 s one after another on an H200 host).
_DRAW = []


def draw_later(fn, *args):
    _DRAW.append((fn, args))


def _draw_one(i):
    fn, args = _DRAW[i]
    fn(*args)


def draw_all():
    jobs = int(os.environ.get("NB_REPORT_JOBS", "0") or 0) or min(8, os.cpu_count() or 1)
    try:
        if jobs > 1 and len(_DRAW) > 1 and "fork" in multiprocessing.get_all_start_methods():
            with multiprocessing.get_context("fork").Pool(min(jobs, len(_DRAW))) as pool:
                pool.map(_draw_one, range(len(_DRAW)), chunksize=1)
        else:
            for i in range(len(_DRAW)):
                _draw_one(i)
    finally:
        _DRAW.clear()


# ------------------------------------------------------------------ per-figure sections

def figure_block(md, ctx, num_, slug, stem, title, data, drawn, reason, device, fig_fn, figdir):
    md.append(f"### Figure {num_} — {title}\n")
    if drawn:
        fname = f"{slug}__fig{num_}_{stem}.png"
        draw_later(fig_fn, data, os.path.join(figdir, fname), device)
        md.append(f"Drawn in [REPORT.md](REPORT.md) ([{fname}]({ctx.rel(os.path.join(figdir, fname))})); every point:\n")
        return fname
    md.append(f"_Not drawn: {reason}._\n")
    return None


def sec_fig1(md, ctx, d):
    eager = d["eager"]
    rows = []
    for r in d["rows"]:
        rec = r["record"]
        val = dget(rec.data, "validation", "passed")
        rows.append([r["label"], ms(r["ms"]), ms(r["min"]), ms(r["max"]), str(r["repeats"]), times(r["speedup"]),
                     sig(rec.metric("w"), 6), sig(rec.metric("b"), 6), sig(rec.metric("test_loss"), 5),
                     {True: "passed", False: "FAILED", None: "not run"}.get(val, "not run")
                     if dget(rec.data, "validation", "performed") else "not run", ctx.link(rec)])
    md.append(table(["implementation", "median", "min", "max", "repeats", "speed-up vs eager", "w", "b",
                     "test loss", "--validate", "record"], rows) + "\n")
    if eager:
        md.append(f"Speed-up = PyTorch eager median ({ctx.link(eager)}) / the row's median; times are "
                  "`timing.total_ms` of each record (what they include: see Threats to validity).\n")


def sec_fig2(md, ctx, d):
    rows = []
    f = d["floor"]
    for k, pts in d["series"].items():
        for n, t, r in pts:
            epochs = r.cfg_num("epochs")
            gbps = (A.bytes_per_epoch_linreg(n) * epochs / (t / 1e3) / 1e9) if epochs and t else None
            rows.append([A.label(*k), f"{n:,}", ms(t), sig(t * 1e3 / epochs, 4) + " µs" if epochs else DASH,
                         sig(gbps, 4), copy_rate_text(A.copy_share(r, t, f["copy_gbps"])) if f else DASH, ctx.link(r)])
    md.append(long_table(["implementation", "n", "training time", "per epoch", "effective GB/s (8 B × n_train / epoch)",
                          "against the copy bandwidth", "record"], rows, "Every point of the figure") + "\n")
    if f:
        md.append(f"The dashed line (a rate, not a floor: data that stays in L2 or on chip runs below it): 8 bytes "
                  f"(x and y, float32) × n_train × {f['epochs']} epochs / {sig(f['copy_gbps'])} GB/s "
                  f"(peaks.copy_gbps of {ctx.link(f['record'])}, which counts bytes read + written); "
                  "n_train = n − ⌊n/5⌋. " + COPY_RATE_RULE + "\n")


def sec_fig3(md, ctx, d):
    for p in d["panels"]:
        md.append(f"**{p['title']}** — device time per epoch (µs) by category; per epoch = summary total / "
                  "(runs the summary covers × epochs): ours cover the measured repeats, the twins' torch.profiler "
                  "summary one extra untimed run.\n")
        rows = []
        for b in p["bars"]:
            flag = ""
            if b["measured_us"] and b["sum_us"] > 1.1 * b["measured_us"]:
                flag = " (more than the measured epoch: the summary may cover more than the timed runs)"
            rows.append([b["label"]] + [sig(b["cats"][c], 4) for c in A.CATEGORIES] +
                        [sig(b["sum_us"], 4) + flag, sig(b["measured_us"], 4), ctx.link(b["record"])])
        md.append(table(["implementation"] + A.CATEGORIES + ["sum", "measured epoch (total / epochs)", "record"], rows) + "\n")
        krows = []
        for b in p["bars"]:  # one row an implementation, its kernels one a line of the cell
            ks = [f"{code(A.short(name))} {sig(us, 4)} µs, {cat}, {count(calls)} calls"
                  for name, cat, us, calls in b["kernels"][:8]]
            if ks:
                krows.append([b["label"], "<br>".join(ks), ctx.link(b["record"])])
        md.append("<details><summary>Kernels behind the bars (top 8 per implementation)</summary>\n")
        md.append(table(["implementation", "kernel or copy: µs per epoch, category, calls (whole summary)", "record"],
                        krows) + "\n")
        md.append("</details>\n")
        rcats = sorted({c for b in p["bars"] if b["ranges"] for c in b["ranges"]})
        if rcats:
            rrows = [[b["label"]] + [sig((b["ranges"] or {}).get(c), 4) for c in rcats] + [ctx.link(b["record"])]
                     for b in p["bars"] if b["ranges"]]
            md.append("Host time per epoch (µs) inside NVTX ranges, by category (ranges measure host time — "
                      "enqueueing, or waiting when they contain a sync — and nested ranges overlap):\n")
            md.append(table(["implementation"] + rcats + ["record"], rrows) + "\n")


def sec_fig4(md, ctx, d):
    r = d["record"]
    win = d["t1"] - d["t0"]
    rows = [["window length", sig(win, 4) + " µs"],
            ["GPU rows (streams) drawn", str(sum(1 for row in d["rows"] if not all(
                A._is_host(e, d["pnames"]) for e in d["events"] if (e["pid"], e["tid"]) == row)))],
            ["time with a copy in flight", sig(d["copy_us"], 4) + " µs"],
            ["time with a kernel running", sig(d["kernel_us"], 4) + " µs"],
            ["copy time overlapped by a kernel", sig(d["overlap_us"], 4) + " µs" +
             (f" ({pct(d['overlap_us'] / d['copy_us'] * 100)} of copy time)" if d["copy_us"] else "")]]
    md.append(table(["quantity (from the trace window)", "value"], rows) + "\n")
    md.append(f"From {ctx.link(r)} (tag {code(r.tag)}, config: {config_summary(r)}); trace file "
              f"[{code(os.path.basename(d['trace']))}]({ctx.rel(d['trace'])}) — open it in Perfetto for the whole run.\n")


def w1_table(ctx, rows):
    rows = [[r["label"], ms(r["epoch_ms"]), times(r["speedup"]), pct(r["final_acc"]),
             sig(r["peak_mem"] / 2 ** 20, 4) if r["peak_mem"] is not None else DASH, ctx.link(r["record"])]
            for r in rows]
    return table(["implementation", "time per epoch", "speed-up vs eager", "final test accuracy",
                  "peak device memory (MiB)", "record"], rows) + "\n"


def sec_fig5(md, ctx, d):
    md.append(w1_table(ctx, d["rows"]))
    commit = lambda r: str(dget(r["record"].data, "git", "commit", default="unknown"))[:7]
    eager = next((r for r in d["rows"] if r["label"] == "PyTorch eager"), None)
    if eager is not None:
        apart = [f"{r['label']} ({code(commit(r))})" for r in d["rows"] if commit(r) != commit(eager)]
        if apart:
            md.append(f"Not from the run of PyTorch eager (commit {code(commit(eager))}): " + ", ".join(apart) +
                      ". Their speed-ups compare separate runs; host-bound times (phase 4, the PyTorch modes) "
                      "move by up to ~25% between runs.\n")
    if d["seeds"]:
        md.append("Seed study (W1 with dropout, tags `w1-seed<k>`): test accuracy after the last epoch.\n")
        rows = []
        for s in d["seeds"]:
            for seed, acc, r in s["accs"]:
                rows.append([s["label"], str(seed), pct(acc), ctx.link(r)])
            rows.append([s["label"], "**mean**", "**" + pct(s["mean"]) + "**", ctx.links([r for _, _, r in s["accs"]])])
        md.append(table(["implementation", "seed", "test accuracy", "record"], rows) + "\n")
    if d.get("fashion"):
        md.append("The same model, flags and epochs on Fashion-MNIST (`--dataset fashion-mnist`, tags `w1-fashion-*`; "
                  "speed-up against PyTorch eager on the same data):\n")
        md.append(w1_table(ctx, d["fashion"]))


def sec_fig6(md, ctx, d):
    rows = []
    for k, pts in d["series"].items():
        relm = {h: (x, who) for h, x, who in d["rel"].get(k, [])}
        for h, t, r in pts:
            rx = relm.get(h)
            rows.append([A.label(*k), str(h), ms(t), (times(rx[0]) + f" (vs {rx[1]})") if rx else DASH, ctx.link(r)])
    fl = d.get("floor") or {}
    for h, t, bound in fl.get("points", []):
        rows.append([f"floor ({bound})", str(h), ms(t), DASH, ", ".join(ctx.link(r) for r in fl["records"])])
    md.append(long_table(["implementation", "h", "time per step", "fastest framework / ours", "record"], rows,
                         "Every point of the figure") + "\n")
    if fl.get("label"):
        md.append(f"The floor is that of {fl['label']}: the larger of a step's FLOPs at that ceiling and its bytes at "
                  "that rate (L2 while the weights fit in it).\n")
    if d["twin_best"]:
        md.append("The fastest framework time at each h comes from: " + "; ".join(
            f"h = {h}: {A.label(*k)} ({ctx.link(r)})" for h, (_, k, r) in sorted(d["twin_best"].items())) + ".\n")


def exchange_phase_block(ctx, d):
    """Figure 6's companion: one product phase of the grid step alone, per way of reading the exchanged
    activation (tools/exchange_product), or nothing where no record is on the device."""
    if not d:
        return ""
    rows = []
    for row in d["rows"]:
        cells = []
        for K in d["ks"]:
            c = row["cells"].get(K)
            cells.append(DASH if not c else (f"{sig(c[0], 3)} µs" + (f" ({sig(c[1], 3)})" if c[1] is not None else " (bare)")))
        rows.append([esc(row["name"]), esc(row["exchange"]), esc(row["weights"])] + cells)
    out = ("One product phase of the grid kernel's step alone (`tools/exchange_product`, " + ctx.link(d["record"]) +
           "): a block of 256 threads reads the exchanged activation H [32][K] and multiplies it by its 16 weight rows, "
           "publishes its 16 columns of the next H and meets the other K / 16 blocks (in the rows marked busy team, 256 "
           "more threads a block run the grid kernel's update work meanwhile, as its update team does); µs a round, in "
           "brackets the round less the bare round of the same exchange and team (publish and barrier only). K = 1,024 "
           "is W2's h = 1,024 on 64 blocks.\n\n" + table(["way", "exchange", "weights"] + [f"K = {K:,}" for K in d["ks"]], rows) + "\n")
    said = [f"K = {K:,}: 8-byte fragments straight from L2 {sig(d['own'][K], 3)} µs a round, the fastest {esc(d['best'][K][0])} "
            f"{sig(d['best'][K][1], 3)} µs" for K in d["ks"] if K in d["own"] and K in d["best"]]
    if said:
        out += "; ".join(said) + ".\n"
    if any(c and c[1] is not None and c[1] < 0 for row in d["rows"] for c in row["cells"].values()):
        out += ("A bracket below zero: that product costs less than the bare rounds of the same exchange differ "
                "between launches.\n")
    return out


def sec_fig7(md, ctx, d):
    rows = []
    for p in d["panels"]:
        for k, c in p["curves"].items():
            gap = p["gaps"].get(k) or p["twin_gaps"].get(k)
            part = (f"; compared up to {c[2]} {gap[2]} of its {gap[3]}, where the reference's log ends"
                    if gap and gap[2] < gap[3] else "")
            if gap and gap[0] == 0:
                gtxt = "0 (identical at every shared point" + part + ")"
            elif gap:
                gtxt = pct(gap[0] * 100) + f" at {c[2]} {gap[1]}" + (f" ({part[2:]})" if part else "")
            else:
                gtxt = "reference" if k == p["ref"] else DASH
            eg = p["exact_gaps"].get(k)
            if eg and eg[0] == 0:
                etxt = f"0 (identical, {eg[2]} steps)"
            else:
                etxt = (pct(eg[0] * 100) + f" (step {eg[1]} of {eg[2]})") if eg else DASH
            rows.append([p["title"], A.label(*k), str(len(c[1])), sig(c[1][-1], 5), gtxt, etxt,
                         ctx.link(p["records"][k])])
    md.append(table(["curve", "implementation", "points", "last loss", "largest relative gap vs reference",
                     "first exact steps: largest relative gap", "record"], rows) + "\n")
    wins = sorted({p["window"] for p in d["panels"] if p["window"]})
    if wins:
        md.append(f"Each logged point is the mean loss of {', '.join(map(str, wins))} consecutive steps starting at "
                  "its step (`loss.per_step`, reduce = mean); the exact-step column compares "
                  "`loss.per_step.first_exact`, the first steps' own losses.\n")
    md.append("Reference: the PyTorch eager twin where present, else the first twin; gaps are "
              "|curve − reference| / |reference| over the logged points both curves share, for the frameworks' "
              "other modes as for ours: theirs are the spread that the order of fp32 sums alone gives a curve "
              "(over the 9,000-odd steps of W1 without dropout, two runs one rounding apart drift apart).\n")


def sec_fig8(md, ctx, d):
    rows = []
    bw, fp = d["copy_gbps"], d["fp16_tflops"]
    for p in d["points"]:
        pc, pt = A.point_shares(p, bw, fp)
        rows.append([p["label"], code(A.short(p["kernel"])), count(p["bytes"]), count(p["flops"]), sig(p["gbps"], 4),
                     f"on chip: {times(pc / 100)} the HBM copy rate" if pc is not None and pc > 100 else pct(pc),
                     sig(p["tflops"], 4), f"above it: {times(pt / 100)}" if pt is not None and pt > 100 else pct(pt),
                     ctx.link(p["record"])])
    md.append(table(["implementation", "kernel", "bytes", "FLOPs", "GB/s", "% of copy peak", "TFLOP/s",
                     "% of fp16 peak", "record"], rows) + "\n")
    if d["peak_record"]:
        md.append(f"Peaks: copy {sig(bw)} GB/s, fp16 tensor cores {sig(fp)} TFLOP/s, from {ctx.link(d['peak_record'])}. "
                  "Percentages come from the record's own `pct_*` fields when present, else are computed "
                  "against these peaks. fp32 SIMT kernels have a lower compute roof than the fp16 one drawn. " +
                  ROOF_RULE + "\n")


def sec_fig9(md, ctx, d):
    w1 = d.get("from_w1") or set()
    rows = [[A.label(*k) + (" (its W1 run)" if k in w1 else ""), f"{b:,}", sig(s, 4), ctx.link(r)]
            for k, pts in d["series"].items() for b, s, r in pts]
    md.append(long_table(["implementation", "batch", "samples/s", "record"], rows, "Every point of the figure") + "\n")
    if w1:
        md.append("\"Its W1 run\": a framework mode with no batch-sweep record on this device is drawn at the batch "
                  "of its W1 record (`metrics.samples_per_s`), which trains the sweep's model (the same layers, "
                  "optimizer, dropout, data and precision).\n")


def batch_step_table(d):
    """Figure 9's sweep as time a step (batch / samples per second), one row a batch where phase 5's
    default path and an fp32 framework mode were both measured; every path's time, and the default
    path against the fastest fp32 framework mode of the row (a TF32 series is shown, never the yardstick)."""
    series = {k: {b: (b / sps * 1e3 if sps else None) for b, sps, _ in pts}
              for k, pts in d["series"].items() if k not in (d.get("from_w1") or set())}
    commit = {k: {b: str(dget(r.data, "git", "commit", default="unknown"))[:7] for b, _, r in pts}
              for k, pts in d["series"].items()}
    mine = A.BATCH_DEFAULT
    ours = [k for k in series if not A.is_twin(k[0])]
    twins = [k for k in series if A.is_twin(k[0])]
    fp32 = [k for k in twins if A.is_fp32_yardstick(k)]
    if mine not in series or not fp32:
        return ""
    rows = []
    for b in sorted(series[mine]):
        tw = [(series[k][b], k) for k in fp32 if series[k].get(b)]
        if not series[mine].get(b) or not tw:
            continue
        fast, fk = min(tw)
        pair = [commit[mine][b], commit[fk][b]]
        rows.append([f"{b:,}"] + [us(series[k].get(b)) if series[k].get(b) else DASH for k in ours + twins] +
                    [f"{times(fast / series[mine][b])} vs {A.label(*fk)}", " / ".join(dict.fromkeys(pair))])
    if not rows:
        return ""
    return (table(["batch"] + [A.label(*k) for k in ours + twins] + [f"{A.label(*mine)} × fastest fp32 framework",
                                                                      "commit (ours / framework)"], rows) +
            "\n\nµs a step (batch / samples per second of each record); × = the fastest framework mode's time at that "
            "batch / phase 5's default path's (its fp32-accurate GEMM plan), among framework modes with fp32 matmuls"
            + (" (a TF32 series is drawn for comparison, never as the yardstick)" if len(fp32) < len(twins) else "") +
            "; the commits of those two records (one where they are the same): rows of different commits are "
            "different code.\n")


def sci(x):
    """A small positive quantity (relative error, tolerance) in 3 significant digits with an exponent."""
    return DASH if x is None else f"{x:.3g}"


def sec_fig13(md, ctx, d):
    rows = []
    for p in d["panels"]:
        ref = {pt[0]: pt[1] for pt in p["series"].get(p["yardstick"], [])}
        for impl, pts in p["series"].items():
            for b, t, row, r in pts:
                shape = " × ".join(f"{int(num(row.get(k)) or 0):,}" for k in ("M", "N", "K"))
                chk = {True: "passed", False: "**FAILED**"}.get(row.get("passed"), "not judged")
                rows.append([p["precision"], f"layer {p['layer']} {p['product']}", f"{b:,}", A.gemm_short(impl), shape,
                             us(num(row.get("ms"))), sig(t, 4), times(t / ref[b]) if ref.get(b) else DASH,
                             sci(num(row.get("rel_err"))), sci(num(row.get("tol"))), chk,
                             count(num(row.get("splits"))), ctx.link(r)])
    md.append(long_table(["precision", "product", "batch", "implementation", "M × N × K", "time", "TFLOP/s",
                          "× the TFLOP/s of cuBLASLt at the same precision", "relative error vs float64",
                          "tolerance", "check", "K slices", "record"], rows, "Every point of the figure") + "\n")
    roofs = [f"{q}: {esc(v['text'])}" + (f" ({ctx.link(v['record'])})" if v["record"] else "")
             for q, v in sorted(d["roofs"].items(), key=lambda kv: A.GEMM_PRECISIONS.index(kv[0]))
             if any(p["precision"] == q for p in d["panels"])]
    incl = sorted({str(dget(r.data, "timing", "includes")) for r in d["records"]
                   if A.gemm_key(r) and dget(r.data, "timing", "includes")})
    md.append("Time: the row's `ms`" + (f" (the records' `timing.includes`: {'; '.join(esc(i) for i in incl)})" if incl else "") +
              "; TFLOP/s: the row's `tflops`, 2·M·N·K / that time. Roofs drawn: " + ("; ".join(roofs) if roofs else "none") +
              ".\n")
    md.append(gemm_check_sentence(ctx, d) + "\n")


def gemm_check_sentence(ctx, d):
    """How the rows are checked, and what the records drawn say about it."""
    c = d["check"]
    precs = [q for q in A.GEMM_PRECISIONS if any(p["precision"] == q for p in d["panels"])]
    us_ = {"fp32": "u = 2^-24 for fp32", "fp16": "u = 2^-22 for fp16 (whose reference multiplies the same fp16 operands" +
           (f"; the {c['byte_reference']:,} rows of step 6 on layer 0, which multiplies the images' bytes as integers, "
            "against X = byte / 255 itself: the row's `reference`" if c.get("byte_reference") else "") + ")"}
    s = ("Every row is checked against a float64 reference computed on the GPU from the same operands: the norm-wise "
         "relative error of every row but cuBLASLt TF32's must stay within 2u·√K + 8u, with "
         f"{' and '.join(us_[q] for q in precs)}. "
         f"{c['passed']:,} of the {c['judged']:,} judged rows of the {c['records']} record(s) drawn meet it")
    if c["worst_over_tol"] is not None:
        s += f" (the largest error: {pct(c['worst_over_tol'] * 100)} of its tolerance)"
    s += "."
    if c["failed"]:
        s += " Over their tolerance: " + "; ".join(
            f"{k[0]} batch {k[1]:,} layer {row['layer']} {esc(row['product'])} {esc(row['impl'])}: "
            f"{sci(num(row.get('rel_err')))} against {sci(num(row.get('tol')))} ({ctx.link(r)})"
            for k, row, r in c["failed"][:12]) + (" …" if len(c["failed"]) > 12 else "") + "."
    if c["records_not_passed"]:
        s += " Records whose `validation.passed` is not true: " + ctx.links(c["records_not_passed"]) + "."
    if c["tf32_over_tol"]:
        s += (f" cuBLASLt TF32's error is recorded, never judged: it reaches {times(c['tf32_over_tol'][1])} the fp32 "
              "tolerance of the same product.")
    return s


def gemm_paragraph(ctx, d):
    """Figure 13's paragraph in REPORT.md: what the products and the rungs are, and how they are checked."""
    fp32 = [p for p in d["panels"] if p["precision"] == "fp32"] or d["panels"]
    share = A.gemm_share(d)
    s = ("Phase 5's GEMM benchmark (`--gemm-compare`) times every product of a W1 step (784-128-64-10) on its own at "
         "batch B. Drawn are layer 0's " +
         " and ".join(f"{p['product'].replace('-', ' ')} (M × N × K = {p['shape']})" for p in fp32) +
         (f": {pct(share[0] * 100)} of the multiply-adds of the step's GEMMs at batch {share[1]:,} "
          f"({ctx.link(share[2])})" if share else "") + ". ")
    s += ("The rungs: own-tile is the 32 × 64 SIMT tile (fp32 FMAs on the CUDA cores, steps 1–4 of the GEMM ladder); "
          + ("own-fma64 is step 7, fp32 FMAs in warp tiles (8 × 4 results a thread) in step 5's 64 × 64 tile and "
             "pipeline; " if any("own-fma64" in p["series"] for p in d["panels"]) else "") +
          "own-tf32x3 is step 5, which splits each fp32 operand into two TF32 parts and adds three tensor-core products "
          "in fp32; " + ("own-i8-digits is step 10 (the forward only): the gathered bytes times W's three 8-bit "
                        "digits on the integer tensor cores, exact int32 sums, the digit pass timed with it; "
                        if any("own-i8-digits" in p["series"] for p in d["panels"]) else "") +
          "the own rungs are planned as phase 5 plans them (split-K and its fix-up). cuBLASLt fp32 "
          "(`CUBLAS_COMPUTE_32F`) is the yardstick. cuBLASLt TF32 (dashed, hollow markers) rounds the operands to "
          "TF32: faster arithmetic, not the same numerics as fp32.")
    if any(p["precision"] == "fp16" for p in d["panels"]):
        s += " The fp16 row sets own-tile-wmma, the fp16 tile on WMMA tensor-core instructions, against cuBLASLt fp16."
        if any("own-f16-mma" in p["series"] for p in d["panels"]):
            s += " own-f16-mma is step 6: fp16 products on `mma.sync` in step 5's 64 × 64 tile."
        if any("own-f16-wgmma" in p["series"] for p in d["panels"]):
            s += (" own-f16-wgmma is step 9: the same tile with each warpgroup's 64 × 32 half on Hopper's `wgmma` "
                  "(B from shared memory in its canonical layout).")
    n, g = d["check"]["records"], d.get("gathered", 0)
    if n:
        s += (" Layer 0's X: " + ("bytes of a random batch of images gathered as the step reads them (the own rungs "
                                  "through the step's view, cuBLASLt on a materialized copy)" if g == n else
                                  "a dense random matrix, not the gathered bytes the step reads" if g == 0 else
                                  f"gathered from bytes as the step reads them in {g} of the {n} records, a dense "
                                  "random matrix in the others") + ".")
    fma = d.get("fma") or []
    if fma and any(x[3] == "own-fma64" for x in fma):
        lo = min(fma, key=lambda x: x[4])
        s += (f" On the CUDA cores alone (the faster of own-tile and own-fma64), the {len(fma)} products of at least "
              f"100 MFLOP at batch {min(x[0] for x in fma):,} … {max(x[0] for x in fma):,} run at "
              f"{times(lo[4])}–{times(max(x[4] for x in fma))} cuBLASLt fp32's speed (time over time), "
              f"{sum(1 for x in fma if x[4] >= 0.9)} of them at 0.9× or more (the lowest: layer "
              f"{lo[1]} {lo[2].replace('-', ' ')} at batch {lo[0]:,}, {esc(lo[3])}).")
    return s + " " + gemm_check_sentence(ctx, d)


# ------------------------------------------------------------------ where the time goes (per-step account)

ACCOUNT_FIG_FIRST = 10  # figures 10, 11, 12: one per workload of analysis.ACCOUNT_PANELS


def us(x_ms):
    return DASH if x_ms is None else sig(x_ms * 1e3) + " µs"


def account_sentence(panel, row):
    """One sentence per implementation from its numbers, e.g. 'PyTorch eager: a W1 step takes X µs,
    of which the GPU computes Y µs (Z%); the rest, W µs, is the framework ...'."""
    u, what, unit_ms, busy = row["unit"], panel["what"], row["unit_ms"], row["busy_ms"]
    if unit_ms is None or busy is None:
        return None
    twin = A.is_twin(row["key"][0])
    s = f"{row['label']}: {what} takes {us(unit_ms)}"
    if panel.get("steps_per_epoch"):
        s += f" (an epoch of {count(panel['steps_per_epoch'])} steps: {ms(unit_ms * panel['steps_per_epoch'])})"
    if busy > 1.05 * unit_ms:
        s += f"; its summed device time per {u}, {us(busy)}, is longer than that"
        if A.pdl_on(row["record"]):
            s += (": under programmatic dependent launch a kernel's duration includes its wait for the kernel "
                  "ahead, so kernel times overlap")
        return s + "."
    if busy >= unit_ms:
        return s + (f"; the GPU is busy for all of it (device time per {u}: {us(busy)}, from the "
                    f"{'profiled' if A.is_twin(row['key'][0]) else 'traced'} run)") + "."
    if row.get("busy_hi_ms"):  # JAX: a range (time_account)
        return s + (f", of which the GPU computes between {us(busy)} and {us(row['busy_hi_ms'])} "
                    f"({A.row_busy_text(row)}: its profiled run took longer than the timed one, and whether the "
                    "profiler stretched the host's part alone or the device's too is not known)") + "."
    s += f", of which the GPU computes {us(busy)} ({pct(busy / unit_ms * 100)})"
    gap = unit_ms - busy
    if twin:
        s += f"; the rest, {us(gap)}, is the framework"
        extra = []
        if row["launches"] is not None:
            extra.append(f"{sig(row['launches'], 3)} kernels")
        if row["host_ms"] is not None:
            extra.append(f"{us(row['host_ms'])} of host time issuing them (profiled run)")
        if extra:
            s += f" ({' and '.join(extra)} per {u})"
    else:
        s += f"; for the other {us(gap)} the GPU waits (launches, copies, synchronisation)"
    return s + "."


def sec_time_account(md, ctx, d, slug, device, figdir, written):
    md.append("### Where the time goes\n")
    md.append("Per step (linear regression: per epoch) and implementation: the timed median time of the unit "
              "(`timing`), the device time of its kernels and copies (twins: `account`, from one extra untimed "
              "torch.profiler run; ours: the CUPTI summary of the traced run(s)), grouped by what the kernels do, "
              "and the gap — the part of the step in which the GPU computes nothing, waiting for the host "
              "(framework, launches, synchronisation). Kernel classes come from kernel names (rules in Appendix B). "
              "Host time: the host wall time of the profiled loop before its final synchronize, per unit "
              "(twins only; the profiler adds its own cost to it).\n")
    if not d["panels"]:
        md.append("_Not drawn: no record of the three workloads carries a kernel summary or an `account`._\n")
        return
    for i, (wl, title, _) in enumerate(A.ACCOUNT_PANELS):
        p = next((p for p in d["panels"] if p["workload"] == wl), None)
        n_ = ACCOUNT_FIG_FIRST + i
        md.append(f"#### Figure {n_} — where the time goes: {title}\n")
        if p is None:
            md.append("_Not drawn: no record of this workload carries a kernel summary or an `account`._\n")
            continue
        fname = f"{slug}__fig{n_}_time_account_{wl}.png"
        draw_later(F.fig_time_account, p, os.path.join(figdir, fname), device, f"Figure {n_} — where the time goes: {title}")
        written.add(fname)
        md.append(f"Drawn in [REPORT.md](REPORT.md) ([{fname}]({ctx.rel(os.path.join(figdir, fname))})).\n")
        d.setdefault("drawn", {})[wl] = fname
        u = p["rows"][0]["unit"]
        rows = []
        for row in p["rows"]:
            share = A.row_busy_text(row)
            rows.append([row["label"], us(row["unit_ms"]), us(row["host_ms"]),
                         sig(row["launches"], 3) if row["launches"] is not None else DASH,
                         us(row["kernel_ms"]), us(row["busy_ms"]), us(row["idle_ms"]), share] +
                        [sig(row["cats"].get(c, 0.0) * 1e3, 4) for c in A.ACCOUNT_CATEGORIES] + [ctx.link(row["record"])])
        md.append(table([f"implementation", f"time per {u} (timed)", "host time issuing", f"kernels per {u}",
                         "kernel time", "device busy", "GPU idle (time − busy)", "busy share"] +
                        [f"{c} (µs)" for c in A.ACCOUNT_CATEGORIES] + ["record"], rows) + "\n")
        sents = [x for x in (account_sentence(p, row) for row in p["rows"]) if x]
        if sents:
            md.append("\n".join("- " + x for x in sents) + "\n")
        srcs = sorted({row["busy_source"] for row in p["rows"] if row["busy_source"]})
        notes = [f"busy time: {s_} — " + ", ".join(row["label"] for row in p["rows"] if row["busy_source"] == s_)
                 for s_ in srcs]
        jax_src = sorted({row["source"] for row in p["rows"] if A.is_jax(row["key"][0]) and row.get("source")})
        notes += [f"JAX's `account`: {esc(s_)} — " + ", ".join(row["label"] for row in p["rows"]
                                                             if A.is_jax(row["key"][0]) and row.get("source") == s_)
                  for s_ in jax_src]
        skipped = [row for row in p["rows"] if row["skipped_ms"]]
        if skipped:
            notes.append("evaluation kernels (names with `eval`) left out of our summaries, as the timed step excludes "
                         "evaluation: " + ", ".join(f"{row['label']} {us(row['skipped_ms'])} per {u}" for row in skipped))
        md.append("Sources: " + "; ".join(notes) + ".\n")
        if any((A.busy_pct(row) or 0) > 100 for row in p["rows"]):
            md.append(A.BUSY_OVER_NOTE + "\n")


# ------------------------------------------------------------------ phases: predicted vs measured

def verdict(ok):
    return DASH if ok is None else ("met" if ok else "**not met**")


def timing_extra(r, key):
    """timing.<key> as a number, or the median of a stats object there (phase 3 writes
    upload_ms / first_epoch_ms as {min, median, ...}); else metrics.<key>."""
    v = dget(r.data, "timing", key)
    if isinstance(v, dict):
        v = v.get("median")
    v = num(v)
    return v if v is not None else r.metric(key)


def phase_targets(phase, sel, recs):
    """[(target, measured, verdict, [records])] for the chapter targets this phase can be held to."""
    out = []
    lad = {row["key"]: row for row in sel[1]["rows"]}
    eager = lad.get(("pytorch_linreg", "pytorch-eager"))
    me = lad.get((phase, "cuda"))
    if phase in ("phase1_naive", "phase2_shared_mem", "phase3_fused_streams") and me and eager:
        out.append(("headline vs PyTorch eager (same device)", f"{ms(me['ms'])} vs {ms(eager['ms'])}: {times(me['speedup'])}",
                    DASH, [me["record"], eager["record"]]))
    if phase == "phase2_shared_mem":
        p1 = lad.get(("phase1_naive", "cuda"))
        if p1 and me:
            x = p1["ms"] / me["ms"]
            out.append(("≥ 2× faster than phase 1 (headline)", times(x), verdict(x >= 2), [me["record"], p1["record"]]))
    if phase == "phase3_fused_streams":
        if me:
            out.append(("headline ≤ 1.0 ms", ms(me["ms"]), verdict(me["ms"] <= 1.0), [me["record"]]))
            if eager:
                out.append(("≥ 90× PyTorch eager", times(me["speedup"]), verdict(me["speedup"] >= 90),
                            [me["record"], eager["record"]]))
        f = sel[2]["floor"]
        for n, t, r in sel[2]["series"].get((phase, "cuda"), []):
            if n >= 50000000 and f:
                ep = r.cfg_num("epochs")
                gb = A.bytes_per_epoch_linreg(n) * ep / (t / 1e3) / 1e9
                cs = A.copy_share(r, t, f["copy_gbps"])
                out.append((f"n = {n:,}: epoch reads ≥ 85% of copy bandwidth", f"{sig(gb)} GB/s = {copy_rate_text(cs)}",
                            verdict(cs >= 85), [r, f["record"]]))
        hs = {}
        for r in recs:
            bt = A.base_tag(r)
            if r.phase == phase and bt.startswith("host-streams") and bt[12:].isdigit() and r.total_ms() is not None:
                hs.setdefault(int(bt[12:]), []).append(r)
        hs = {k: A.newest_first(v)[0] for k, v in hs.items()}
        multi = [k for k in sorted(hs) if k > 1]
        if multi:
            r = hs[multi[-1]]
            up, fe = timing_extra(r, "upload_ms"), timing_extra(r, "first_epoch_ms")
            if up is not None and fe is not None:
                out.append((f"--source host, {multi[-1]} streams: first epoch ends within 10% of the pure upload time",
                            f"first epoch {ms(fe)} vs upload {ms(up)} ({times(fe / up)})", verdict(fe <= 1.1 * up), [r]))
            if 1 in hs:
                a, b = hs[1].total_ms(), r.total_ms()
                out.append((f"--source host: upload + epochs faster with {multi[-1]} streams than with 1",
                            f"{ms(b)} vs {ms(a)}", verdict(b < a), [r, hs[1]]))
    w1 = {row["key"]: row for row in sel[5]["rows"]}
    weager = w1.get(("pytorch_mlp", "pytorch-eager"))
    wgraph = w1.get(("pytorch_mlp", "pytorch-graph"))
    if phase == "phase4_mlp":
        for impl in ("cuda-fp32", "cuda-fp16"):
            m = w1.get((phase, impl))
            if m and weager:
                out.append((f"W1 {impl}: ≥ 10× faster per epoch than PyTorch eager", times(m["speedup"]),
                            verdict(m["speedup"] >= 10), [m["record"], weager["record"]]))
        s32 = {h: (t, r) for h, t, r in sel[6]["series"].get((phase, "cuda-fp32"), [])}
        s16 = {h: (t, r) for h, t, r in sel[6]["series"].get((phase, "cuda-fp16"), [])}
        for h in sorted(set(s32) & set(s16)):
            if h >= 2048:
                x = s32[h][0] / s16[h][0]
                out.append((f"W2 h = {h}: fp16 ≥ 2× the fp32 path", times(x), verdict(x >= 2), [s16[h][1], s32[h][1]]))
    if phase in ("phase4_mlp", "phase5_batched"):
        for s in sel[5]["seeds"]:
            if s["key"][0] == phase and len(s["accs"]) >= 3:
                out.append((f"W1 {s['label']}: ≥ 97.5% test accuracy (mean of {len(s['accs'])} seeds)", pct(s["mean"]),
                            verdict(s["mean"] >= 97.5), [r for _, _, r in s["accs"]]))
    if phase == "phase5_batched":
        # the W1 speed targets are judged on the fastest fp32 phase 5 path (graph of fused kernels or
        # the persistent kernels)
        paths = [w1[k] for k in ((phase, "cuda"), (phase, "cuda-persistent"), (phase, "cuda-pipelined"),
                                     (phase, "cuda-cluster32")) if k in w1]
        m = min(paths, key=lambda row: (row["epoch_ms"], row["label"])) if paths else None
        if m:
            who = f" ({m['label']})"
            out.append(("W1 epoch ≤ 25 ms (waypoint)" + who, ms(m["epoch_ms"]), verdict(m["epoch_ms"] <= 25), [m["record"]]))
            out.append(("W1 epoch ≤ 10 ms (goal)" + who, ms(m["epoch_ms"]), verdict(m["epoch_ms"] <= 10), [m["record"]]))
            if weager:
                out.append(("W1: ≥ 300× PyTorch eager" + who, times(m["speedup"]), verdict(m["speedup"] >= 300),
                            [m["record"], weager["record"]]))
            if wgraph:
                x = wgraph["epoch_ms"] / m["epoch_ms"]
                out.append(("W1: ≥ 45× the CUDA-graph twin" + who, times(x), verdict(x >= 45), [m["record"], wgraph["record"]]))
            twins = [row for k, row in w1.items() if A.is_torch(k[0]) and row["peak_mem"] is not None]
            if m["peak_mem"] is not None and twins:
                lo = min(twins, key=lambda row: (row["peak_mem"], row["label"]))
                out.append(("W1 peak device memory ≤ the twin's", f"{sig(m['peak_mem'] / 2**20)} MiB vs {sig(lo['peak_mem'] / 2**20)} MiB ({lo['label']})",
                            verdict(m["peak_mem"] <= lo["peak_mem"]), [m["record"], lo["record"]]))
        # W2 is fp16 matrix math: phase 5's own-GEMM W2 runs are its "cuda-fp16" series, its cluster
        # kernel's (h = 128 only) the "cuda-cluster" series, its grid kernel's (rung 5g) the "cuda-grid"
        # series; the speed targets are judged on the fastest phase 5 path at each width (named in the row)
        own = {h: (t, r) for h, t, r in sel[6]["series"].get((phase, "cuda-fp16"), [])}
        best = A.w2_best_phase5(sel[6]["series"])
        who = {h: A.label(best[h][1].phase, best[h][1].impl) for h in best}
        tb = sel[6]["twin_best"]
        if best and tb:
            common = sorted(set(best) & set(tb))
            if common:
                bad = [h for h in common if best[h][0] >= tb[h][0]]
                out.append(("W2: faster than every twin mode at every h (fastest phase 5 path)",
                            f"{len(common) - len(bad)} of {len(common)} widths" + (f" (not at h = {', '.join(map(str, bad))})" if bad else ""),
                            verdict(not bad), [best[h][1] for h in common] + [tb[h][2] for h in common]))
        ew = {h: (t, r) for h, t, r in sel[6]["series"].get(("pytorch_mlp", "pytorch-eager"), [])}
        for h, goal in ((128, 50), (8192, 2.5)):
            if h in best and h in ew:
                x = ew[h][0] / best[h][0]
                out.append((f"W2 h = {h}: ≥ {goal}× PyTorch eager ({who[h]})", times(x), verdict(x >= goal),
                            [best[h][1], ew[h][1]]))
            if h in own and h in best and best[h][1] is not own[h][1] and h in ew:
                x = ew[h][0] / own[h][0]
                out.append((f"W2 h = {h}: the graph path (own GEMMs fp16) against PyTorch eager", times(x), DASH,
                            [own[h][1], ew[h][1]]))
        # the GEMM target, product by product, from --gemm-compare (own plain GEMM vs cuBLASLt on the
        # h = 8192 shapes); the whole trainer's step against the cuBLASLt trainer's as a second view
        gc = A.newest_first([r for r in recs if r.phase == phase and r.tag == "gemm-compare-h8192-fp16"])
        if gc:
            for prod, x in A.gemm_speed_rows(gc[0]):
                out.append((f"W2 h = 8192, fp16 {esc(prod)}: own GEMM ≥ 70% of cuBLASLt's speed",
                            pct(x * 100), verdict(x >= 0.7), [gc[0]]))
        lt = {h: (t, r) for h, t, r in sel[6]["series"].get((phase, "cuda-cublaslt"), [])}
        if 8192 in own and 8192 in lt:
            x = lt[8192][0] / own[8192][0]
            out.append(("W2 h = 8192: the trainer on own kernels against the same trainer on cuBLASLt (step time)",
                        times(x), DASH, [own[8192][1], lt[8192][1]]))
    return out


def top_kernels(r, n=5):
    ks = [k for k in as_list(r.data.get("kernels")) if isinstance(k, dict) and isinstance(k.get("name"), str)
          and num(k.get("total_ns")) is not None]
    tot = sum(num(k["total_ns"]) for k in ks)
    ks.sort(key=lambda k: (-num(k["total_ns"]), k["name"]))
    return [(k["name"], num(k.get("calls")), num(k.get("mean_ns")), num(k["total_ns"]) / tot * 100 if tot else None,
             k.get("grid"), k.get("block")) for k in ks[:n]]


def note_contents(text, limit=16):
    """The parts of a phase note, in order: its headings, else the bold words that open its paragraphs
    ('What it adds', 'Predicted', ...), parentheses and a closing full stop left out."""
    heads = [m.strip() for m in re.findall(r"^#{1,6}\s+(.+?)\s*$", text, flags=re.M)]
    if not heads:
        heads = [m.strip() for m in re.findall(r"^\*\*([^*\n]+?)\*\*", text, flags=re.M)]
    out = []
    for h in heads:
        h = re.sub(r"\s*\(.*?\)", "", h).rstrip(" .:—")
        if h and h not in out:
            out.append(h)
    return out[:limit] + (["…"] if len(out) > limit else [])


def sec_phases(md, ctx, recs, sel, dev_dir, notes_dir):
    md.append("### The phases: what each adds, what was predicted, what was measured\n")
    for pn, phase in PHASES:
        md.append(f"#### Phase {pn} — `{phase}`\n")
        notes_path = os.path.join(notes_dir, phase + ".md")
        if A.present(notes_path):
            with open(notes_path, encoding="utf-8") as f:
                parts = note_contents(f.read())
            md.append(f"**Notes** — [{code(phase + '.md')}]({ctx.rel(notes_path)})" +
                      (": " + "; ".join(parts) if parts else "") + ". Below, what the records of this device "
                      "measure.\n")
        mine = [r for r in recs if r.phase == phase]
        if not mine:
            md.append("**Measured.** No records of this phase on this device: not yet measured.\n")
            continue
        md.append(f"**Measured** ({len(mine)} record(s) of this phase on this device).\n")
        tg = phase_targets(phase, sel, recs)
        if tg:
            md.append("Targets are the issues' predictions, stated for an H100; on another GPU they are a yardstick, "
                      "not a verdict. Ratios compare records of this device only.\n")
            md.append(table(["target or comparison", "measured", "verdict", "records"],
                            [[t, m, v, ctx.links(rs)] for t, m, v, rs in tg]) + "\n")
        else:
            md.append("No record of this phase fills a target's comparison yet.\n")
        # profile: our CUPTI summary of the most representative record
        with_k = [r for r in mine if as_list(r.data.get("kernels"))]
        if with_k:
            # not a --breakdown run (its kernel carries clock stamps: an ablation), and a run without
            # PDL: under PDL a kernel's CUPTI duration includes its wait for the one before
            pref = sorted(with_k, key=lambda r: (r.tag.endswith("-breakdown"), A.pdl_on(r),
                                                 0 if A.base_tag(r).startswith("headline") or A.base_tag(r) == "w1" else 1,
                                                 tuple(-ord(c) for c in r.utc_time), r.path))[0]
            rows = [[code(A.short(nm)), count(c), sig(mn / 1e3 if mn is not None else None, 4), pct(sh),
                     esc(g) if g is not None else DASH, esc(b) if b is not None else DASH]
                    for nm, c, mn, sh, g, b in top_kernels(pref)]
            md.append(f"**What the profile shows** — top kernels of {ctx.link(pref)} (our CUPTI summary, measured runs):\n")
            md.append(table(["kernel", "calls", "mean µs", "share of kernel time", "grid", "block"], rows) + "\n")
            mc = [m for m in as_list(pref.data.get("memcpy")) if isinstance(m, dict)]
            if mc:
                md.append(table(["copy kind", "calls", "bytes", "total µs"],
                                [[esc(m.get("kind", "?")), count(num(m.get("calls"))), count(num(m.get("bytes"))),
                                  sig(num(m.get("total_ns")) / 1e3 if num(m.get("total_ns")) is not None else None, 4)]
                                 for m in sorted(mc, key=lambda m: str(m.get("kind")))]) + "\n")
        cmp_ = A.nsys_comparison(dev_dir, pn, phase, recs)
        if cmp_ is not None:
            csvrel = ctx.rel(cmp_["csv"])
            md.append(f"**nsys against our tracer** — [{code(os.path.basename(cmp_['csv']))}]({csvrel}) "
                      f"(`make profile PHASE={pn}`, tracer off) vs " +
                      (ctx.link(cmp_["record"]) if cmp_["record"] else "no record") + ":\n")
            if cmp_["problem"]:
                md.append(f"_{cmp_['problem']}._\n")
            if cmp_["rows"]:
                rows = [[code(A.short(x["name"])), count(x["nsys_calls"]), sig(x["nsys_mean_ns"] / 1e3 if x["nsys_mean_ns"] is not None else None, 4),
                         count(x["ours_calls"]), sig(x["ours_mean_ns"] / 1e3 if x["ours_mean_ns"] is not None else None, 4),
                         times(x["ours_mean_ns"] / x["nsys_mean_ns"]) if x["ours_mean_ns"] and x["nsys_mean_ns"] else DASH]
                        for x in cmp_["rows"]]
                md.append(table(["kernel (base name)", "nsys calls", "nsys mean µs", "CUPTI calls", "CUPTI mean µs",
                                 "CUPTI / nsys mean"], rows) + "\n")
                same = not cmp_["only_nsys"] and not cmp_["only_ours"]
                md.append(("Kernel lists match (same kernel names in both). " if same else
                           "Kernel lists differ: only in nsys: " + (", ".join(map(code, cmp_["only_nsys"])) or DASH) +
                           "; only in our summary: " + (", ".join(map(code, cmp_["only_ours"])) or DASH) + ". ") +
                          "Our tracer's summary covers only the traced training runs (it is cleared after data "
                          "generation and warm-up), and nsys sees the whole process: so kernels that run only during "
                          "set-up appear in nsys alone, and call counts differ by design.\n")
        for s in A.ncu_summaries(dev_dir, pn):
            what = ("speed-of-light section" if any("Speed Of Light" in x for x in s["sections"]) else
                    "where the warps stall, `make ncu STALLS=1`" if s["sections"] else "no headline section")
            md.append(f"**Nsight Compute** — {code(s['file'])} ({what}):\n")
            if s["problem"]:
                md.append(f"_{s['problem']}._\n")
            elif s["rows"]:
                md.append(table(["kernel", "metric", "value", "unit"],
                                [[code(A.short(x["kernel"])), esc(x["metric"]), esc(x["value"]), esc(x["unit"])]
                                 for x in s["rows"]]) + "\n")
            ncu_regions_block(md, s)
            ncu_lines_block(md, s)


def pairs(v):
    """[name, number] pairs of a list, the malformed ones left out."""
    return [p for p in as_list(v) if isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str)
            and num(p[1]) is not None]


def ncu_part(md, s, part):
    """A stalls profile's summary `part` ("regions", "lines"), or None: absent, or unreadable (then a
    line saying why goes into md)."""
    if s.get(f"{part}_problem"):
        md.append(f"_{code(s[part + '_file'])}: {esc(s[part + '_problem'])}._\n")
        return None
    return s.get(part) or None


def ncu_regions_block(md, s, limit=8):
    """A stalls profile's summary by code region (scripts/ncu_regions.py): where the warps' samples
    went, and the stretches of machine code that took the most issue slots or samples."""
    g = ncu_part(md, s, "regions")
    if not g:
        return
    shares = [(n, v) for n, v in (g.get("stall_share") or {}).items() if num(v) is not None][:8]
    md.append(f"By stretch of machine code ({code(s['regions_file'])}: runs of instructions that executed equally "
              f"often; {count(num(g.get('executed_warp_instructions')))} warp instructions executed in the sampling pass, "
              "which differs from the table's count where polls spin: each replay polls its own number of rounds): the warps' "
              "samples went to " + ", ".join(f"{esc(n)} {pct(100 * num(v))}" for n, v in shares) +
              ". A sample counts at the instruction a warp waits to issue, so a barrier's wait shows on the "
              "instruction after it.\n")
    rows = []
    for r in g["regions"][:limit]:
        if not isinstance(r, dict):
            continue
        rows.append([f"{count(num(r.get('first')))}–{count(num(r.get('last')))}", count(num(r.get("instructions"))),
                     count(num(r.get("executions"))), pct(100 * num(r.get("issue_share")) if num(r.get("issue_share")) is not None else None),
                     pct(100 * num(r.get("sample_share")) if num(r.get("sample_share")) is not None else None),
                     ", ".join(f"{esc(p[0])} {pct(100 * num(p[1]))}" for p in pairs(r.get("top_stalls"))) or DASH,
                     " ".join(f"{esc(p[0])}×{count(num(p[1]))}" for p in pairs(r.get("ops"))) or DASH])
    if rows:
        md.append(table(["SASS instructions", "count", "runs", "issue share", "sample share", "top stalls", "opcodes"],
                        rows) + "\n")


def ncu_lines_block(md, s, limit=10):
    """A stalls profile's summary by statement of the kernel's body (scripts/ncu_lines.py): for a
    persistent kernel, its phases; with the profile's `per` (warps x steps), instructions a warp a step."""
    g = ncu_part(md, s, "lines")
    if not g:
        return
    per = num(g.get("per"))
    md.append(f"By statement of the kernel's body ({code(s['lines_file'])}: each instruction charged to the call of the "
              "kernel's own code it was inlined into; the source lines of the same build, `nvdisasm -gi`)" +
              (f"; per: executions / {count(per)}, instructions a warp a step for a persistent kernel" if per else "") +
              ":\n")
    rows = []
    for r in g["statements"][:limit]:
        if not isinstance(r, dict):
            continue
        rows.append([code(f"{r.get('file')}:{r.get('line')}"), count(num(r.get("sass_instructions"))),
                     pct(100 * num(r.get("issue_share")) if num(r.get("issue_share")) is not None else None),
                     pct(100 * num(r.get("sample_share")) if num(r.get("sample_share")) is not None else None)] +
                    ([sig(num(r.get("executed_per")), 4)] if per else []) +
                    [", ".join(f"{esc(p[0])} {pct(100 * num(p[1]))}" for p in pairs(r.get("top_stalls"))) or DASH])
    if rows:
        md.append(table(["statement", "SASS instructions", "issue share", "sample share"] + (["per"] if per else []) +
                        ["top stalls"], rows) + "\n")


# ------------------------------------------------------------------ threats, appendix

APPENDIX_GROUP = 4  # records of one program, commit and day that share a row of Appendix A
APPENDIX_PATH_KEYS = {"tag", "record_tag", "out", "data", "init", "order", "save-init", "save-order", "trace", "records"}


def config_text(items, limit=12):
    """'k=v ...' of (key, value) pairs, the first `limit` of them (a record's config: config_summary)."""
    parts = []
    for k, v in items[:limit]:
        if isinstance(v, float):
            v = repr(v)
        elif isinstance(v, bool):
            v = "true" if v else "false"
        elif isinstance(v, (list, dict)):
            v = ",".join(str(x) for x in v) if isinstance(v, list) else "{…}"
        parts.append(f"{k}={v}")
    if len(items) > limit:
        parts.append(f"(+{len(items) - limit} more)")
    return " ".join(parts) if parts else DASH


def config_summary(r, limit=12):
    return config_text(sorted(r.config.items()), limit)


def jax_timing_paragraph(ctx, recs, summ):
    """How the JAX twin is timed and what its clock includes, from its records; None without JAX records.
    summ: the summary rows (analysis.summary_table), whose `jax` entry is each workload's fastest JAX mode."""
    jx = [r for r in recs if A.is_jax(r.phase)]
    if not jx:
        return None
    methods = ", ".join(code(m) for m in sorted({str(dget(r.data, "timing", "method")) for r in jx}))
    s = ("**How JAX is timed** — CUDA events are not available from JAX, so the JAX twin times with the host's wall "
         f"clock, stopped after `block_until_ready` (`timing.method` {methods}). Every timed interval — the whole run; "
         "for the MLP's jit-step and jit-epoch modes, each epoch (baselines/jax) — includes one dispatch from Python "
         "and one host-device synchronisation, which the CUDA-event times of ours and of PyTorch do not; jit-step "
         "also dispatches once an epoch (linear regression) or a step (MLP) inside its interval.")
    with_d = [(num(dget(r.data, "timing", "dispatch_ms")), r) for r in jx]
    with_d = sorted(((d, r) for d, r in with_d if d is not None), key=lambda t: (t[0], t[1].path))
    used = []
    if with_d:
        ds = [d for d, _ in with_d]
        med = statistics.median(ds)
        s += (f" The twin measures that overhead as `timing.dispatch_ms`, the wall time of dispatching an empty jitted "
              f"function and blocking on it: median {ms(med)} over {len(ds)} JAX record(s) ({ms(ds[0])} to {ms(ds[-1])}).")
        parts = []
        for row in summ or []:
            if not row.get("jax"):
                continue
            t, m, rec = row["jax"]
            total = rec.total_ms()
            if not total:
                continue
            epochs = rec.cfg_num("epochs") if rec.phase == "jax_mlp" and m != "jax-jit-run" else None
            interval = f"an epoch, {ms(total / epochs)}" if epochs else f"the run, {ms(total)}"
            parts.append(f"{row['workload']}: {mode_name(m)} (timed interval: {interval}), the dispatch "
                         f"{pct(med / (total / epochs if epochs else total) * 100)} of it")
            used.append(rec)
        if parts:
            s += " Against the fastest JAX mode of each workload — " + "; ".join(parts) + "."
    else:
        s += " No JAX record of this device carries `timing.dispatch_ms`, so that overhead is not quantified here."
    prec = sorted({str(dget(r.data, "software", "matmul_precision")) for r in jx
                   if dget(r.data, "software", "matmul_precision") is not None})
    if prec:
        s += f" JAX's matmul precision: {', '.join(map(code, prec))} (`software.matmul_precision`)."
    flags = sorted({str(dget(r.data, "software", "xla_flags")) for r in jx if dget(r.data, "software", "xla_flags")})
    if flags:
        s += " XLA flags: " + ", ".join(map(code, flags)) + "."
    if with_d:  # the fastest modes' records and those with the least and the most dispatch time
        s += " Records: " + ctx.links(used + [with_d[0][1], with_d[-1][1]]) + "."
    return s + "\n"


# A run's own measurement inside a timing text ("graph capture (0.622374 ms host time)"): masked when the
# texts are grouped, or every record would be a row of its own.
RUN_NUMBER = re.compile(r"\(\d+(?:\.\d+)? ms host time\)")


def sec_threats(md, ctx, recs, all_dev, summ=None):
    md.append("### Threats to validity\n")
    md.append("**What each side's timing includes and excludes** (from the records' `timing` objects; a number a "
              "run measured inside that text, such as a graph capture's host time, shown as …):\n")
    groups = {}
    for r in recs:
        t = r.data.get("timing") or {}
        key = (A.label(r.phase, r.impl) if r.phase not in ("ceilings", "tracer_overhead") else r.phase,
               str(t.get("method")), RUN_NUMBER.sub("(… ms host time)", str(t.get("includes", DASH))),
               RUN_NUMBER.sub("(… ms host time)", str(t.get("excludes", DASH))))
        groups.setdefault(key, []).append(r)
    rows = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2], k[3])):
        rs = groups[key]
        wu = sorted({str(num(dget(r.data, "timing", "warmup")) if num(dget(r.data, "timing", "warmup")) is not None else "?") for r in rs})
        rp = sorted({str(A.repeats_of(r)) for r in rs})
        rows.append([key[0], key[1], esc(key[2]), esc(key[3]), "/".join(x.replace(".0", "") for x in wu), "/".join(rp), str(len(rs))])
    md.append(table(["implementation", "method", "includes", "excludes", "warm-up", "repeats", "records"], rows) + "\n")
    bullets = []
    clocks = sorted({(num(dget(r.data, "device", "sm_clock_khz")), num(dget(r.data, "device", "mem_clock_khz")))
                     for r in recs if not r.impl.endswith("cpu")} - {(None, None)},
                    key=lambda ab: tuple(-1.0 if v is None else v for v in ab))
    clk = "; ".join(f"SM {sig(a / 1e3, 4)} MHz, memory {sig(b / 1e3, 4)} MHz" for a, b in clocks if a and b)
    bullets.append("Clocks were not locked: the GPU boosts and throttles on its own, so repeated runs vary; "
                   "medians of repeats are reported with min and max beside them. Clock values recorded (device "
                   f"properties, not the clock during the run): {clk or DASH}.")
    hosts = sorted({str(dget(r.data, "host", "hostname")) for r in recs})
    bullets.append(f"One machine: every number in this section comes from host(s) {', '.join(map(code, hosts))} "
                   f"dated {A.date_range(recs)} (UTC); another GPU, driver or PyTorch version can rank things differently.")
    few = sorted({r.file for r in recs if A.base_tag(r).startswith("headline") and A.repeats_of(r) < 5})
    if few:
        bullets.append("Headline records with fewer than 5 measured repeats: " + ", ".join(map(code, few)) + ".")
    dirty = sorted({r.file for r in recs if dget(r.data, "git", "dirty") is True or dget(r.data, "git", "commit") in (None, "unknown")})
    if dirty:
        bullets.append(f"{len(dirty)} record(s) were made from a modified work tree or an unknown commit, so the "
                       "code that produced them is not exactly a commit: " + ", ".join(map(code, dirty[:12])) +
                       (" …" if len(dirty) > 12 else "") + ".")
    cpu = [r for r in recs if r.impl.startswith("pytorch-cpu")]
    if cpu:
        bullets.append("PyTorch CPU runs ran on " + ", ".join(sorted({code(r.device_name) for r in cpu})) +
                       " and sit in this GPU's section because they are compared with it.")
    pdl = [r for r in recs if A.pdl_on(r)]
    if pdl:
        bullets.append(f"{len(pdl)} phase 5 record(s) ran with programmatic dependent launch (`metrics.pdl`): a kernel "
                       "starts before the one ahead of it has finished and waits inside, so its CUPTI duration "
                       "includes that wait and the kernel summaries add up to more than the step. Step and epoch "
                       "times are unaffected; the kernel figures (3, 8) and profile tables use `--pdl off` runs "
                       "where one exists.")
    to = [r for r in recs if r.phase == "tracer_overhead" or r.workload == "tracer_overhead"]
    for r in A.newest_first(to)[:1]:
        mets = r.data.get("metrics") or {}
        vals = ", ".join(f"{k} = {sig(num(v), 4)}" for k, v in sorted(mets.items()) if num(v) is not None)
        bullets.append(f"Our CUPTI tracer perturbs what it measures; its overhead on small launches was measured "
                       f"in {ctx.link(r)}: {vals or 'no numeric metrics'}. Events time the device, but a launch-bound run "
                       "waits for the host, so the tracer's cost per launch shows in its time: records with "
                       "`timing.traced` false ran their timed runs without the tracer (the summaries come from "
                       "separate traced runs, `trace_runs`); records with `timing.traced` true (phase 1's, before it "
                       "moved to the common runner) traced their timed runs (under 0.1% of a phase-1 epoch, those "
                       "records note).")
    if not to:
        bullets.append("The tracer's overhead has no record on this device (tool `tracer_overhead`), so its effect "
                       "on traced runs is not quantified here.")
    bullets.append("Both sides are timed from data already resident on the device unless the record says otherwise "
                   "(`--source host` runs include the upload); warm-up runs (compilation, autotuning, cuBLAS "
                   "handles) are excluded on both sides, which favours torch.compile and max-autotune.")
    bullets.append("Kernel summaries of the twins come from torch.profiler, ours from CUPTI; both time kernels on "
                   "the device, but the profiler adds its own overhead around launches.")
    notes = sorted({(r.file, n) for r in recs for n in as_list(r.data.get("notes")) if isinstance(n, str)})
    if notes:
        bullets.append("Notes the records carry: " + "; ".join(f"{code(f)}: {esc(n)}" for f, n in notes[:30]) +
                       (" …" if len(notes) > 30 else "") + ".")
    md.append("\n".join("- " + b for b in bullets) + "\n")
    jp = jax_timing_paragraph(ctx, recs, summ)
    if jp:
        md.append(jp)
    tc = A.tracer_cost(recs)
    if tc:
        ratios = sorted(x["ratio"] for x in tc)
        md.append(f"**What our tracer costs a run** — {len(tc)} record(s) time their runs without our CUPTI tracer "
                  "and then run the same training once more with it on (that run feeds the kernel summaries; "
                  "`timing.traced_run_ms`). The traced run against the median timed run: "
                  f"{times(ratios[0])} to {times(ratios[-1])} (median {times(ratios[len(ratios) // 2])}). "
                  "The largest:\n")
        rows = [[x["label"], code(x["tag"]), ms(x["timed_ms"]), ms(x["traced_ms"]), times(x["ratio"]), ctx.link(x["record"])]
                for x in tc[:10]]
        md.append(table(["implementation", "tag", "timed (median)", "traced run", "traced / timed", "record"], rows) + "\n")


def framework_version(r):
    """'JAX 0.4.35 (jaxlib 0.4.35)' of a JAX record (software.jax, software.jaxlib)."""
    sw = r.data.get("software") or {}
    return f"JAX {sw.get('jax')}" + (f" (jaxlib {sw.get('jaxlib')})" if sw.get("jaxlib") else "")


def appendix(md, ctx, devices):
    md.append("## Appendix A — every record read\n")
    md.append("Each table cell above names the record it comes from; this is what each record says about "
              "itself. Versions: GPU driver / CUDA runtime / framework (PyTorch's version, or JAX's with its jaxlib). "
              "Records of one program, commit, day, software, timing and status share a row when there are "
              f"{APPENDIX_GROUP} or more of them (a sweep's runs): its config cell gives the keys whose values differ "
              "between them (k=v1/v2/…: each record's value, in the order the row lists them; paths and tags by name "
              "only), then what they have in common.\n")
    for slug, (name, recs) in devices.items():
        md.append(f"### {name} (`{slug}`)\n")
        groups = {}
        for r in sorted(recs, key=lambda r: r.path):
            d = r.data
            sw = d.get("software") or {}
            drv = sw.get("driver") if sw.get("driver") is not None else dget(d, "device", "driver_version")
            cud = sw.get("cuda_runtime") if sw.get("cuda_runtime") is not None else dget(d, "device", "runtime_version")
            vers = f"{version(drv)} / {version(cud)} / {framework_version(r) if sw.get('jax') else sw.get('torch') or DASH}"
            commit = str(dget(d, "git", "commit", default="unknown"))[:10] + (" (dirty)" if dget(d, "git", "dirty") is True else "")
            t = d.get("timing") or {}
            tm = f"{t.get('method')}; includes: {t.get('includes', DASH)}; excludes: {t.get('excludes', DASH)}"
            status = r.status + ("; " + "; ".join(r.problems) if r.problems else "")
            key = (r.phase, str(r.utc_time)[:10], esc(r.device_name), vers, commit, esc(tm), esc(status))
            groups.setdefault(key, []).append(r)
        rows = []
        for key, rs in sorted(groups.items(), key=lambda kv: kv[1][0].path):
            _, _, dev, vers, commit, tm, status = key
            if len(rs) < APPENDIX_GROUP:
                rows += [[ctx.link(r), r.utc_time, dev, vers, code(commit), esc(config_summary(r)), tm, status] for r in rs]
                continue
            for i in range(0, len(rs), 20):  # (at most 20 links a row)
                part = rs[i:i + 20]
                keys = sorted(set().union(*(r.config.keys() for r in part)))
                differ = [k for k in keys if len({repr(r.config.get(k)) for r in part}) > 1]
                common = [(k, part[0].config[k]) for k in keys if k not in differ and k in part[0].config]
                times = sorted(str(r.utc_time) for r in part)
                shown = []  # a differing key's values in the order of the row's records (paths and tags: the key only)
                for k in differ:
                    if k in APPENDIX_PATH_KEYS:
                        shown.append(k)
                    else:
                        vals = [config_text([(k, r.config[k])]).split("=", 1)[1] if k in r.config else DASH for r in part]
                        shown.append(f"{k}={'/'.join(vals)}")
                cfg = f"differ: {', '.join(shown) or DASH}; common: {config_text(common)}"
                rows.append([ctx.links(part), f"{times[0]} … {times[-1]}", dev, vers, code(commit), esc(cfg), tm, status])
        md.append(table(["record", "UTC time", "device", "driver / CUDA / framework", "commit", "config", "timing", "status"], rows) + "\n")


def method_appendix(md):
    md.append("## Appendix B — how the report reads the records\n")
    md.append("\n".join("- " + s for s in [
        "Only records with status `ok` are drawn or tabulated in the figures; others are listed per device.",
        "Roles come from the tag in the file name (`<phase>__<tag>.json`): `headline*` (5M × 200), `sweep*` "
        "(size sweep; n from config), `w1`, `w1-nodrop`, `w1-seed<k>`, `w2*` (h from config.layers), "
        "`batch-sweep*` (batch from config), `host-streams<k>`, `nsys` (the `make profile` run). A trailing "
        "`-<implementation>` on a tag is ignored. Two records filling the same slot: the newest wins and the "
        "figure's section says which was left out.",
        "Times: `timing.total_ms.median`; per epoch = that / config.epochs; per step = that / config.steps.",
        "Figure 2's dashed line: 8 bytes (float32 x and y) × n_train × epochs / measured copy GB/s, n_train = n − ⌊n/5⌋, "
        "from the device's `ceilings` record (else the newest record carrying `peaks`).",
        "Figure 3's categories (kernel names from CUPTI / torch.profiler): " + "; ".join(A.CATEGORY_RULES) + ".",
        "Figure 4's window: from the start of the burst of GPU activity (no gap over 200 µs) that leads up to the end "
        "of the first launch of the most-launched kernel (one per epoch in phase 3); copies are events whose category or name says memcpy/memset/HtoD/DtoH; "
        "host rows are events whose category or process name says nvtx/range/host/cpu. The trace preferred is the one "
        "of a `host-streams<k>` record with the largest k.",
        "Framework modes: PyTorch from Python (`pytorch_*` records), PyTorch from C++ (`libtorch_*`) and JAX "
        "(`jax_*`). Every × against \"the fastest framework\" divides by the fastest of all of them measured on the "
        "same device (the record each figure selects for that mode) and names the framework and mode beside the ratio.",
        "Figure 6's relative speed: the fastest framework mode's time at that h / ours. In figures 6 and 9 two "
        "points of a series are joined by a line only when the series measured every width (batch size) of the "
        "sweep between them (the widths h = " + ", ".join(map(str, A.W2_HS)) + "; our batch sizes); a mode "
        "measured at a few of them is drawn as points. In figure 9 neither are two points of different commits "
        "(different code) joined.",
        "Figures 10–12 (where the time goes): per unit = summary total / units the summary covers (twins: "
        "`account.steps`, else config.epochs for linear regression; ours: trace_runs × epochs or steps); idle = "
        "timed median per unit − device-busy time; the run without programmatic dependent launch where there is "
        "one. Kernel classes, first rule that matches the lower-case name: " + "; ".join(A.ACCOUNT_RULES) + ".",
        "Figure 13 (the GEMM ladder against cuBLASLt): phase 5's GEMM benchmark records, tags `gemm-b<B>` (fp32) and "
        "`gemm-b<B>-fp16` (batch from metrics.batch, precision from config.precision), the newest per precision and "
        "batch; of their `metrics.gemm_bench` rows, layer 0's forward and weight-gradient products; TFLOP/s as the "
        "row gives it (2·M·N·K / its time). The ratios in each panel's box and the finding compare each implementation "
        "with cuBLASLt of the same precision at the largest batch every implementation ran; \"fp32-accurate\" leaves "
        "out cuBLASLt TF32, which the benchmark records and never judges.",
        "Figure 8: each implementation's most representative record with an `efficiency` object (headline, else W2 at the "
        "largest h, else W1); arithmetic intensity = flops / bytes.",
        "Numbers are printed with 4 significant digits (3 for ratios and percentages); — means absent or not finite.",
    ]) + "\n")


# ------------------------------------------------------------------ main

# ------------------------------------------------------------------ the first screen

def slower(x):
    """A ratio ours/theirs as words: 37.0× faster, or 37.0× slower (never 0.0271×)."""
    if x is None:
        return DASH
    return f"{sig(x, 3)}× faster" if x >= 1 else f"{sig(1 / x, 3)}× slower"


def mode_name(m):
    """A framework mode named with its framework: 'PyTorch compiled-graph', 'libtorch CUDA graph (C++)',
    'JAX jit-run' (twin_mode's keys)."""
    if not m:
        return DASH
    if m.startswith("jax-"):
        return A.label("jax_", m)
    return A.TWIN_TITLE.get(m, "PyTorch " + m)


def quick_note(recs):
    q = [r for r in recs if A.is_quick(r)]
    if not q:
        return ""
    return (f"{len(q)} of the records drawn come from `make run`'s quick notebook (run_mode quick: REPEATS=2, sweep at "
            "n = 5,000, 500,000 and 5,000,000 without twins, W1 one epoch, W2 at h = 128 with 500/200 steps, batch sweep "
            "at 32, 512 and 8,192, one JAX mode a workload, no torch.compile alone or max-autotune twin; stored under "
            "profiles/<device>/quick/); a full run's record replaces each where both exist.")


def front_data(sel, acc, bench, rs):
    """The numbers of the first screen: summary rows, ladder rows, the sentences, the figures' findings
    and the odd results, each from the selected records."""
    summ = A.summary_table(sel)
    lad = A.ladder_table(sel, acc, bench)
    spread = A.eager_spread(bench)
    f = {}
    lr = next((r for r in summ if r["workload"].startswith("linear")), None)
    w1 = next((r for r in summ if "W1" in r["workload"]), None)
    w2s = [r for r in summ if "W2" in r["workload"]]
    if lr and lr["ours"] and lr["fastest"]:
        f[1] = (f"{lr['ours'][0]} trains 5M points × 200 epochs in {ms(lr['ours'][1])}, {slower(lr['x_fastest'])} "
                f"than the fastest framework mode ({mode_name(lr['fastest'][1])}, {ms(lr['fastest'][0])})")
    if sel[2]["series"]:
        k = ("phase3_fused_streams", "cuda")
        pts = sel[2]["series"].get(k) or next(iter(sel[2]["series"].values()))
        if len(pts) >= 2:
            (n0, t0, r0), (n1, t1, r1) = pts[0], pts[-1]
            f[2] = (f"{A.label(*k) if k in sel[2]['series'] else 'the first series'}: {sig(n1 / n0, 3)}× more points cost "
                    f"{sig(t1 / t0, 3)}× the time ({ms(t0)} at n = {n0:,}, {ms(t1)} at n = {n1:,})")
            # the two ends ran different code where the default path fell back to the per-epoch graph (data off
            # chip) at the large end: the ratio spans that switch, which the heading says
            path = lambda r: dget(r.data, "launch", "path") if hasattr(r, "data") else None  # noqa: E731
            if path(r1) == "graph" and path(r0) != "graph" and dget(r1.data, "config", "path") == "auto":
                fb = min(n for n, _, r in pts if path(r) == "graph")
                f[2] += (f"; from n = {fb:,} its data no longer fits on chip and it runs the per-epoch CUDA graph "
                         f"(hollow), so the two ends are two different kernels")
    tw, ou = [], []
    for p in acc["panels"]:
        for row in p["rows"]:
            if row["unit_ms"] and row["busy_ms"] is not None:
                busy = row.get("busy_hi_ms") or row["busy_ms"]  # (a JAX range: the least idle it allows)
                (tw if A.is_twin(row["key"][0]) else ou).append(
                    (max(0.0, 1 - busy / row["unit_ms"]) * 100, row["label"], p["what"]))
    if tw and ou:
        a = max(tw)  # the framework mode idle the longest, against our least idle path of the same workload
        same = [o for o in ou if o[2] == a[2]]
        if same:
            b = min(same)
            f[3] = (f"the GPU sits idle for up to {sig(a[0], 3)}% of {a[2]} under {a[1]}, "
                    f"{sig(b[0], 3)}% under {b[1]}")
    if "events" in sel[4] and sel[4]["copy_us"]:
        f[4] = f"kernels overlap {sig(sel[4]['overlap_us'] / sel[4]['copy_us'] * 100, 3)}% of the copy time in phase 3's window"
    if w1 and w1["ours"] and w1["fastest"]:
        f[5] = (f"{w1['ours'][0]} trains a W1 epoch in {ms(w1['ours'][1])}, {slower(w1['x_fastest'])} than "
                f"{mode_name(w1['fastest'][1])}")
    rel = [(h, x) for k, pts in sel[6]["rel"].items() for h, x, _ in pts]
    if rel:
        best = {}
        for h, x in rel:
            best[h] = max(best.get(h, 0), x)
        win = sum(1 for x in best.values() if x > 1)
        hs = sorted(best)
        f[6] = (f"our fastest path beats the fastest framework mode at {win} of {len(best)} widths "
                f"({slower(best[hs[0]])} at h = {hs[0]}, {slower(best[hs[-1]])} at h = {hs[-1]})")
        # A framework mode that is the yardstick at some widths but was measured at a few widths only: the
        # ratio at the others is against another mode (each width's yardstick is named under its tick).
        tb = sel[6].get("twin_best") or {}
        for m in sorted({v[1] for v in tb.values()}, key=A.series_sort_key):
            widths = {p[0] for p in sel[6]["series"].get(m, [])}
            rest = [h for h in hs if h not in widths and h in tb]
            if rest:
                others = sorted({A.label(*tb[h][1]) for h in rest})
                f[6] += (f"; {A.label(*m)} measured at h = {', '.join(f'{h:,}' for h in sorted(widths))} only, "
                         f"the other widths against {' and '.join(others)}")
    # Figure 7's heading, panel by panel: ours against the reference twin, beside the spread of the
    # frameworks' own modes against it (fp32 training's summation order alone moves a curve that much).
    parts7 = []
    for p in sel[7]["panels"]:
        if not p["gaps"]:
            continue
        part = (f"{p['title'].split(' (')[0]}: ours within {sig(max(g[0] for g in p['gaps'].values()) * 100, 3)}% "
                f"of {A.label(*p['ref'])}'s curve")
        if p["twin_gaps"]:
            tg = max(g[0] for g in p["twin_gaps"].values())
            part += (f", the frameworks' other modes within {sig(tg * 100, 3)}%" if tg > 0 else
                     ", the frameworks' other modes identical to it")
        short = [g for g in p["gaps"].values() if g[2] < g[3]]
        if short:
            part += (f" (to step {max(g[2] for g in short):,}, where the reference's log ends; "
                     f"ours run to {max(g[3] for g in short):,})")
        parts7.append(part)
    if parts7:
        f[7] = "; ".join(parts7)
    # Figure 8's heading from the points it draws (each implementation's run without PDL where there is one:
    # under PDL a kernel's duration includes its wait), not from the summary table's records.
    shares = []  # (percent of the roof, roof name, point)
    for p in sel[8]["points"]:
        if not (p["ai"] and p["tflops"]):
            continue
        pc, pt = A.point_shares(p, sel[8]["copy_gbps"], sel[8]["fp16_tflops"])  # (the appendix table's shares)
        if pc is not None:
            shares.append((pc, A.HBM_ROOF, p))
        if pt is not None and str(p["record"].config.get("precision") or "") == "fp16":
            shares.append((pt, "fp16 tensor-core peak", p))
    under = [t for t in shares if t[0] <= 100]
    chip = [t for t in shares if t[1] == A.HBM_ROOF and t[0] > 100]
    parts = []

    def who(p):
        k = p["kernel"] or ""
        k = "the library's kernels" if k.startswith("all but ") else (A.base_kernel_name(k) or k)
        return f"{p['label']} ({p['record'].tag}, {k})"
    if under:
        v, name, p = max(under, key=lambda t: (t[0], t[2]["label"]))
        parts.append(f"{who(p)} comes nearest a roof that bounds it: {roof_text(v, name)}")
    if chip:
        v, _, p = max(chip, key=lambda t: (t[0], t[2]["label"]))
        n_chip = len({t[2]["key"] for t in chip})
        parts.append(f"{who(p)} runs above the HBM roof: its data stays on chip ({times(v / 100)} the HBM copy rate)"
                     if n_chip == 1 else
                     f"{n_chip} implementations run above the HBM roof, their data on chip (up to {times(v / 100)} the "
                     f"HBM copy rate, {who(p)})")
    if parts:
        f[8] = "; ".join(parts)
    if sel[9]["series"]:
        k0 = next(iter(sel[9]["series"]))
        pts = sel[9]["series"][k0]
        bb = max(pts, key=lambda p: (p[1], -p[0]))
        last = max(p[0] for p in pts)
        # its own peak, never "the most samples a second" of the figure: other paths may run more there
        f[9] = (f"{A.label(*k0)}'s throughput peaks at the largest batch measured, {bb[0]:,} "
                f"({sig(bb[1] / 1e6, 3)} million samples/s)" if bb[0] == last else
                f"{A.label(*k0)} peaks at batch {bb[0]:,} ({sig(bb[1] / 1e6, 3)} million samples/s)")
        faster = sorted(((p[1], k) for k, ps in sel[9]["series"].items() if k != k0 for p in ps
                         if p[0] == bb[0] and p[1] > bb[1]), reverse=True)
        if faster:
            f[9] += (f"; {len(faster)} other path(s) run more there, the most {A.label(*faster[0][1])} "
                     f"({sig(faster[0][0] / 1e6, 3)} million)")
    if sel[13]["panels"]:
        f[13] = A.gemm_finding(sel[13])
    sents = answer_sentences(summ, acc, spread)
    return {"summary": summ, "ladder": lad, "spread": spread, "findings": f, "sentences": sents,
            "odd": odd_results(sel, acc, bench, spread)}


def summary_records(md, ctx, slug, summ):
    """The records behind the report's summary table, one a row (a line of links would be unreadable)."""
    rows = []
    for row in summ:
        seen = set()
        for r in row["records"]:
            if r is None or r.path in seen:
                continue
            seen.add(r.path)
            rows.append([row["workload"], A.label(r.phase, r.impl), ctx.link(r)])
    if not rows:
        return
    md.append(f'<a id="summary-records-{slug}"></a>\n')
    md.append("### Records behind the summary table\n")
    md.append(long_table(["workload", "implementation", "record"], rows, "The record of every cell", limit=40) + "\n")


def answer_sentences(summ, acc, spread):
    out = []
    # question 1: how much time does PyTorch spend (account: busy vs timed step)
    for p in acc["panels"]:
        tw = [row for row in p["rows"] if A.is_twin(row["key"][0]) and row["unit_ms"] and row["busy_ms"] is not None]
        if not tw:
            continue
        e = next((row for row in tw if row["key"][1] == "pytorch-eager"), tw[0])
        f = min(tw, key=lambda row: (row["unit_ms"], row["label"]))
        s = (f"On {p['title']}, {e['label']} keeps the GPU busy for {us(e['busy_ms'])} of each {e['unit']}'s "
             f"{us(e['unit_ms'])} ({A.busy_text(A.busy_pct(e), e['unit'])}); the rest is the framework and launches")
        if f is not e:
            s += (f"; the fastest profiled framework mode, {f['label']}, takes {us(f['unit_ms'])} with the GPU busy "
                  f"{A.row_busy_text(f)}")
        out.append(s + ".")
        if len(out) == 2:
            break
    # question 2: how fast can hand-written CUDA train them (ours vs the fastest framework mode)
    for r in summ:
        if r["ours"] and r["fastest"]:
            out.append(f"{r['workload'][0].upper() + r['workload'][1:]}: {r['ours'][0]} takes {ms(r['ours'][1])}, "
                       f"{slower(r['x_fastest'])} than the fastest framework mode measured on this device, "
                       f"{mode_name(r['fastest'][1])} ({ms(r['fastest'][0])}).")
        if len(out) == 5:
            break
    return out


def odd_results(sel, acc, bench, spread):
    """One sentence per odd result, from measurements; where the record that would explain it is
    absent, the sentence says so."""
    odd = {}
    lad = {r["key"]: r for r in sel[1]["rows"]}
    e, c, sy = (lad.get(("pytorch_linreg", m)) for m in ("pytorch-eager", "pytorch-compile",
                                                          "pytorch-eager-sync-every-epoch"))
    acc_lr = next((p for p in acc["panels"] if p["workload"] == "linreg"), None)
    launches = {row["key"]: row["launches"] for row in (acc_lr["rows"] if acc_lr else [])}
    if e and c and c["ms"] > e["ms"]:
        kc, ke = launches.get(c["key"]), launches.get(e["key"])
        why = (f"the profiled runs launch {sig(kc, 3)} kernels an epoch under compile against {sig(ke, 3)} under eager"
               if kc is not None and ke is not None else "no record holds a compile account that would say why")
        odd[1] = [f"torch.compile ({ms(c['ms'])}) is slower than eager ({ms(e['ms'])}) here: {why}."]
    if e and sy and sy["ms"] < e["ms"]:
        sp = (f"; eager alone varies between processes on this machine from {ms(spread[0])} to {ms(spread[1])} "
              f"({spread[2]} records at 5M × 200), so the difference is within that spread") if spread else ""
        odd.setdefault(1, []).append(f"Eager with a `loss.item()` sync every epoch ({ms(sy['ms'])}) measured faster than "
                                     f"without ({ms(e['ms'])}){sp}.")
    elif e and sy and spread and spread[2] > 1 and spread[0] <= sy["ms"] <= spread[1]:
        # slower, as a sync should be, but by no more than eager alone varies: the figure's ratio is not the sync's cost
        odd.setdefault(1, []).append(
            f"Eager with a `loss.item()` sync every epoch ({ms(sy['ms'])}) measured {times(sy['ms'] / e['ms'])} the time "
            f"of eager without it ({ms(e['ms'])}), but eager alone varies between processes on this machine from "
            f"{ms(spread[0])} to {ms(spread[1])} ({spread[2]} records at 5M × 200): the sync's cost is within that "
            "spread, not measured by the ratio.")
    f = sel[2]["floor"]
    # phase 3 at 5M points: the headline record where there is one (the ladder's number, said once), else
    # the sweep's point at n = 5M
    p3 = lad.get(("phase3_fused_streams", "cuda"))
    at5m = ([(5000000, p3["ms"], p3["record"])] if p3 and p3["record"].cfg_num("n") == 5000000 else
            [x for x in sel[2]["series"].get(("phase3_fused_streams", "cuda"), []) if x[0] == 5000000])
    for n, t, r in at5m[:1]:
        cs = A.copy_share(r, t, f["copy_gbps"]) if f else None
        l2 = num(dget(r.data, "device", "l2_bytes"))
        if cs is not None and cs > 100:
            odd[2] = [f"At 5M points phase 3 reads at {times(cs / 100)} the HBM copy rate ({code(r.file)}): the "
                      f"{sig(A.bytes_per_epoch_linreg(n) / 1e6, 3)} MB an epoch reads fit the "
                      f"{sig(l2 / 2**20, 3) + ' MiB ' if l2 else ''}L2 cache, so epochs after the first read L2, not HBM."]
    w1 = {r["key"]: r for r in sel[5]["rows"]}
    a, b = w1.get(("phase4_mlp", "cuda-fp32")), w1.get(("phase4_mlp", "cuda-fp16"))
    if a and b and b["epoch_ms"] >= 0.9 * a["epoch_ms"]:
        p = next((p for p in acc["panels"] if p["workload"] == "mlp_w1"), None)
        row = next((x for x in (p["rows"] if p else []) if x["key"] == b["key"]), None)
        why = (f"its GPU is busy {A.busy_text(A.busy_pct(row), 'step')} of a step (CUPTI summary), so the host-driven "
               "step, not the GEMMs, sets the pace" if row and row["busy_ms"] is not None and row["unit_ms"]
               else "no kernel summary of phase 4 fp16 W1 says where its step goes")
        odd[5] = [f"Phase 4 fp16 ({ms(b['epoch_ms'])} an epoch) is no faster than fp32 ({ms(a['epoch_ms'])}): {why}."]
    own = {h: r for h, _, r in sel[6]["series"].get(("phase5_batched", "cuda-fp16"), [])}
    lt = {h: r for h, _, r in sel[6]["series"].get(("phase5_batched", "cuda-cublaslt"), [])}
    gc = A.newest_first([r for r in bench if r.tag == "gemm-compare-h8192-fp16"])
    if 8192 in own and 8192 in lt:
        x = A.step_ms(lt[8192]) / A.step_ms(own[8192])
        speeds = [x for _, x in A.gemm_speed_rows(gc[0])] if gc else []
        ta, tb = A.time_account(own[8192]), A.time_account(lt[8192])
        if speeds and x > 1:
            why = (f"the own trainer launches {sig(ta['launches'], 3)} kernels a step against cuBLASLt's {sig(tb['launches'], 3)} "
                   "(bias, ReLU and the update fused into its GEMMs)" if ta and tb and ta["launches"] and tb["launches"]
                   else "no kernel summary of both trainers at h = 8192 says why")
            odd[6] = [f"Our GEMMs run at {pct(min(speeds) * 100)}–{pct(max(speeds) * 100)} of cuBLASLt's speed "
                      f"(--gemm-compare), yet the trainer built on them is {times(x)} faster than the cuBLASLt trainer at "
                      f"h = 8192: {why}."]
    floor = {h: (f_ms, bound) for h, f_ms, bound in (sel[6].get("floor") or {}).get("points", [])}
    ours = {}
    for k, pts in sel[6]["series"].items():
        if not A.is_twin(k[0]):
            for h, t, _ in pts:
                if t and (h not in ours or t < ours[h]):
                    ours[h] = t
    gaps = [(h, ours[h] / floor[h][0], floor[h][1]) for h in sorted(floor) if h in ours and floor[h][0] > 0]
    if gaps:
        odd.setdefault(6, []).append(
            "The dotted line is the floor of a step that streams its weights (its FLOPs at the fp16 ceiling, or its "
            "bytes at the L2 or HBM rate, whichever is larger): our fastest path is "
            + ", ".join(f"{times(g)} above it at h = {h} ({b})" for h, g, b in gaps)
            + ". Where it is far above, the step is neither arithmetic nor memory but latency: dependent launches, or a one-launch kernel's exchanges.")
    return odd


def front_page(md, ctx, slug, name, all_rs, rs, sel, acc, fr, drawn, figdir):
    first = len(md) <= 2
    md.append(f'<a id="answers-{slug}"></a>\n')
    md.append(f"## {'Answers' if first else 'Answers on another device'}: {name}\n")
    if fr["sentences"]:
        md.append("\n".join(f"{i + 1}. {s_}" for i, s_ in enumerate(fr["sentences"])) + "\n")
    qn = quick_note(rs)
    if qn:
        md.append(qn + "\n")
    summ = fr["summary"]
    if any(r["ours"] for r in summ):
        rows = []
        jax = any(r["jax"] for r in summ)  # a JAX column where the device has JAX records
        for r in summ:
            cells = [r["workload"], (f"{ms(r['ours'][1])} ({r['ours'][0]})" if r["ours"] else DASH)]
            cells += [ms(r["modes"][m][0]) if r["modes"].get(m) else DASH for m, _ in A.SUMMARY_MODES]
            cells.append(f"{ms(r['libtorch'][0])} ({A.TWIN_TITLE.get(r['libtorch'][1], r['libtorch'][1])})" if r["libtorch"] else DASH)
            if jax:
                cells.append(f"{ms(r['jax'][0])} ({mode_name(r['jax'][1])})" if r["jax"] else DASH)
            cells.append(f"{times(r['x_fastest'])} vs {mode_name(r['fastest'][1])}" if r["x_fastest"] else DASH)
            cells.append(times(r["x_eager"]))
            rows.append(cells)
        md.append(table(["workload", "our best (rung)", "PyTorch eager", "compile", "CUDA graph", "compiled-graph",
                         "libtorch (best mode)"] + (["JAX (best mode)"] if jax else []) +
                        ["× fastest framework (mode)", "× eager"], rows) + "\n")
        sp = fr["spread"]
        fws = "PyTorch from Python or C++, or JAX" if jax else "PyTorch from Python or C++"
        md.append("Times are medians of repeats; × = the framework's time / ours, against the fastest framework mode "
                  f"measured on this device ({fws}; named beside the ratio)" +
                  ("; JAX is timed by the host's clock around `block_until_ready`, which includes a dispatch and a "
                   "synchronisation that CUDA events do not (Threats to validity, in the appendix)" if jax else "") +
                  ". Eager varies between processes on the same machine" +
                  (f" ({ms(sp[0])} to {ms(sp[1])} over {sp[2]} linear-regression records at 5M × 200)" if sp else "") +
                  ", so × eager is the looser of the two ratios. The record behind every cell: "
                  f"[APPENDIX.md](APPENDIX.md#summary-records-{slug}).\n")
    lad = fr["ladder"]
    if lad["rows"]:
        md.append("### The ladder\n")
        rows = []
        for r in lad["rows"]:
            roof = roof_text(*r["roof"][:2]) if r["roof"] else DASH
            rows.append([r["workload"], r["label"], r["adds"], ms(r["ms"]), times(r["gain"]) if r["gain"] else DASH,
                         r["limit"], roof, ctx.link(r["record"])])
        md.append(table(["workload", "rung", "what it adds", "time", "gain over the rung before", "what limits it",
                         "against its roof", "record"], rows) + "\n")
        md.append("What limits a rung: the device-busy share of its step from the time account (figures 3, 10–12): "
                  "under 80% the host and launches, not the GPU, set the pace. Roofs: the copy bandwidth and fp16 "
                  "tensor-core peak of the `ceilings` record" + (f" ({ctx.link(lad['peak_record'])})" if lad["peak_record"] else "") +
                  "; fp32 kernels against the nominal fp32 peak (device properties; no record measures it); the best "
                  "of a rung's key kernels (figure 8). " + ROOF_RULE +
                  (" " + A.BUSY_OVER_NOTE if any((r["busy"] or 0) > 100 for r in lad["rows"]) else "") + "\n")
    md.append("### Figures\n")
    titles = {n_: t for n_, _, t in FIGURES}

    def show(n_):
        fname = drawn[n_]
        finding = sel[n_].get("finding")
        md.append(f"#### Figure {n_} — {finding[0].upper() + finding[1:] if finding else titles[n_]}\n")
        md.append(f"![Figure {n_}: {titles[n_]} on {name}]({ctx.rel(os.path.join(figdir, fname))})\n")
        if n_ == 13:
            md.append(gemm_paragraph(ctx, sel[13]) + "\n")
        if n_ == 9:
            md.append(batch_step_table(sel[9]))
        if n_ == 6:
            md.append(exchange_phase_block(ctx, A.exchange_phase(all_rs)))
        for o in fr["odd"].get(n_, []):
            md.append(o + "\n")
        if n_ == 8:
            md.append(ROOF_RULE + "\n")
        md.append(f"{titles[n_]}; every point in [APPENDIX.md](APPENDIX.md#device-{slug}).\n")
    for n_ in sorted(drawn):
        if n_ < ACCOUNT_FIG_FIRST:
            show(n_)
    for i, (wl, title, _) in enumerate(A.ACCOUNT_PANELS):
        fname = (acc.get("drawn") or {}).get(wl)
        if fname:
            n_ = ACCOUNT_FIG_FIRST + i
            md.append(f"#### Figure {n_} — where the time goes: {title}\n")
            md.append(f"![Figure {n_}: where the time goes, {title}, on {name}]({ctx.rel(os.path.join(figdir, fname))})\n")
    for n_ in sorted(drawn):
        if n_ >= ACCOUNT_FIG_FIRST:
            show(n_)
    runs = [r for r in all_rs if r.phase == "run_all"]
    for r in A.newest_first(runs)[:1]:
        steps = [x for x in as_list(r.data.get("steps")) if isinstance(x, dict)]
        md.append(f"The last `make run` ({r.data.get('run_mode', '?')} mode, {ctx.link(r)}) took {ms(r.total_ms())} "
                  "before its report: " + ", ".join(f"{esc(x.get('name'))} {sig(num(x.get('duration_ms')) / 1e3 if num(x.get('duration_ms')) is not None else None, 3)} s "
                                                     f"({esc(x.get('status'))})" for x in steps) + ".\n")


def build(profiles, out, notes_dir, untracked=False):
    # In a git checkout the report reads only the files git tracks: a trace, profile or record made here
    # and not added would make this report differ from a fresh clone's. Without git, every file counts.
    tracked = None if untracked else A.git_tracked(os.path.abspath(profiles))
    A.set_tracked(tracked)
    _DRAW.clear()  # a build that raised before drawing leaves none of its figures to the next
    records, skipped, others = load_profiles(profiles)
    if tracked is not None:
        base = os.path.dirname(os.path.abspath(profiles))
        left = sorted([r.path for r in records if not A.present(r.abspath)] +
                      [x.path for x in skipped if not A.present(os.path.join(base, x.path))] +
                      [o for o in others if not A.present(os.path.join(base, o))])
        records = [r for r in records if A.present(r.abspath)]
        skipped = [x for x in skipped if A.present(os.path.join(base, x.path))]
        others = [o for o in others if A.present(os.path.join(base, o))]
        if left:
            print(f"make_report: {len(left)} file(s) under {profiles} not tracked by git, left out (git add them, "
                  "or --untracked): " + ", ".join(left[:5]) + (" …" if len(left) > 5 else ""), file=sys.stderr)
    figdir = os.path.join(out, "figures")
    os.makedirs(figdir, exist_ok=True)
    ctx = Ctx(out)
    devices = {}
    for r in records:
        devices.setdefault(r.slug, []).append(r)
    dev_named = {}
    # the device with the most records first: its answers open the report
    for slug in sorted(devices, key=lambda s: (-len(devices[s]), s)):
        rs = devices[slug]
        gpu = sorted({r.device_name for r in rs if not r.impl.startswith("pytorch-cpu")})
        dev_named[slug] = (" / ".join(gpu) if gpu else sorted({r.device_name for r in rs})[0], rs)

    md = ["# CUDA notebook — the report\n",
          "Two questions: how much of a training step does PyTorch spend outside the GPU's arithmetic on these "
          "small models, and how fast can hand-written CUDA train them? The answers below are generated from the run "
          "records under `profiles/`; every number is traced to a record in [APPENDIX.md](APPENDIX.md).\n"]
    app = ["# CUDA notebook — appendix\n",
           "Generated by `report/make_report.py` with [REPORT.md](REPORT.md); do not edit by hand — `make report` "
           "rewrites both. Every point of every figure, the phases' targets and profiles, the threats to validity, "
           "every record read (Appendix A) and how the report reads them (Appendix B).\n",
           f"Records read: {len(records)} on {len(devices)} device(s); records skipped: {len(skipped)}.\n"]
    app.append("## Records that could not be read\n")
    if skipped:
        app.append(table(["file", "problem"], [[code(s.path), esc(s.problem)] for s in sorted(skipped, key=lambda s: s.path)]) + "\n")
    else:
        app.append("None.\n")
    if others:
        app.append("Other JSON files under profiles/ (traces and companions, not records): " +
                   ", ".join(code(o) for o in sorted(others)) + ".\n")
    if not records:
        md.append("## No records\n\nNo run record was found under `profiles/`: none of the figures can be drawn. "
                  "Run `make run` on a GPU machine to produce them.\n")

    written = set()
    for slug, (name, all_rs) in dev_named.items():
        rs = [r for r in all_rs if r.status == "ok" and r.phase != "run_all"]
        bench = A.benchmarks(rs)  # no check run stands in for a benchmark
        not_ok = [r for r in all_rs if r.status != "ok"]
        dev_dir = os.path.join(os.path.abspath(profiles), slug)
        app.append(f'<a id="device-{slug}"></a>\n')
        app.append(f"## Device: {name}\n")
        drivers = sorted({version((r.data.get("software") or {}).get("driver") or dget(r.data, "device", "driver_version")) for r in all_rs})
        torches = sorted({str((r.data.get("software") or {}).get("torch")) for r in all_rs if (r.data.get("software") or {}).get("torch")})
        jaxes = sorted({framework_version(r) for r in all_rs if A.is_jax(r.phase) and (r.data.get("software") or {}).get("jax")})
        app.append(f"Folder `profiles/{slug}/`; {len(all_rs)} record(s) dated {A.date_range(all_rs)} (UTC); "
                   f"driver {', '.join(drivers)}; PyTorch {', '.join(torches) or DASH}" +
                   (f"; {', '.join(jaxes)}" if jaxes else "") + ".\n")
        if not_ok:
            app.append("Records not drawn because their status is not `ok`: " +
                       ", ".join(f"{ctx.link(r)} ({r.status})" for r in sorted(not_ok, key=lambda r: r.path)) + ".\n")
        dups = []
        sel = {1: A.select_ladder(bench, dups), 2: A.select_scaling(bench, dups, A.full_run_lanes(all_rs)), 3: A.select_breakdown(bench, dups),
               4: A.select_timeline(bench, dups), 5: A.select_w1(bench, dups), 6: A.select_w2(bench, dups),
               7: A.select_losses(bench, dups), 8: A.select_efficiency(bench, dups), 9: A.select_batch(bench, dups),
               13: A.select_gemm(bench, dups)}
        acc = A.select_time_account(bench, dups)
        sel[8]["fp32_tflops"], sel[8]["fp32_note"] = A.fp32_peak_tflops(bench)
        sel[3]["account"] = acc
        can = {1: bool(sel[1]["rows"]), 2: bool(sel[2]["series"]), 3: bool(acc["panels"]),
               4: "events" in sel[4],
               5: bool(sel[5]["rows"]), 6: bool(sel[6]["series"]), 7: bool(sel[7]["panels"]),
               8: any(p["ai"] and p["tflops"] for p in sel[8]["points"]), 9: bool(sel[9]["series"]),
               13: bool(sel[13]["panels"])}
        reasons = {1: "no linreg record tagged `headline*` with a total time", 2: "no linreg record tagged `sweep*`",
                   3: "no headline or W1 record carries a kernel summary",
                   4: "; ".join(sel[4]["missing"]) or "no usable phase-3 trace",
                   5: "no mlp_w1 record tagged `w1`", 6: "no mlp_w2 record", 7: "no W1-nodrop or W2 loss curve",
                   8: "no record with an `efficiency` entry having both FLOPs and bytes",
                   9: "no mlp_batch_sweep record with metrics.samples_per_s",
                   13: "no phase5_batched record tagged `gemm-b<B>` with rows in `metrics.gemm_bench`"}
        fns = {1: F.fig1_ladder, 2: F.fig2_scaling, 3: F.fig3_breakdown, 4: F.fig4_timeline, 5: F.fig5_w1,
               6: F.fig6_w2, 7: F.fig7_losses, 8: F.fig8_efficiency, 9: F.fig9_batch, 13: F.fig13_gemm}
        secs = {1: sec_fig1, 2: sec_fig2, 3: sec_fig3, 4: sec_fig4, 5: sec_fig5, 6: sec_fig6, 7: sec_fig7,
                8: sec_fig8, 9: sec_fig9, 13: sec_fig13}
        fr = front_data(sel, acc, bench, rs)
        summary_records(app, ctx, slug, fr["summary"])
        for n_ in fns:
            sel[n_]["finding"] = fr["findings"].get(n_)
        missing_lines = []
        drawn = {}

        def one_figure(n_, stem, title):
            fname = figure_block(app, ctx, n_, slug, stem, title, sel[n_], can[n_], reasons[n_], name, fns[n_], figdir)
            if fname:
                written.add(fname)
                drawn[n_] = fname
                secs[n_](app, ctx, sel[n_])
            miss = sel[n_].get("missing") or []
            if not can[n_]:
                missing_lines.append(f"Figure {n_} ({title}): **not drawn** — {reasons[n_]}." +
                                     (" Expected: " + "; ".join(miss) + "." if miss and n_ != 4 else ""))
            elif miss:
                missing_lines.append(f"Figure {n_} ({title}): drawn without " + "; ".join(miss) + ".")
        # in number order: the figures before where the time goes (10-12), those sections, the figures after
        for n_, stem, title in FIGURES:
            if n_ < ACCOUNT_FIG_FIRST:
                one_figure(n_, stem, title)
        sec_time_account(app, ctx, acc, slug, name, figdir, written)
        for m in acc["missing"]:
            missing_lines.append(f"Where the time goes (figures {ACCOUNT_FIG_FIRST}–{ACCOUNT_FIG_FIRST + 2}): " + m + ".")
        for n_, stem, title in FIGURES:
            if n_ >= ACCOUNT_FIG_FIRST:
                one_figure(n_, stem, title)
        fig_dups = sorted(set(dups))
        app.append("### Missing figures and records on this device\n")
        app.append(("\n".join("- " + m for m in missing_lines) if missing_lines else "Every figure is drawn with every "
                    "expected implementation.") + "\n")
        if fig_dups:
            app.append("Records left out because a newer record filled the same slot:\n\n" +
                       "\n".join("- " + d for d in fig_dups) + "\n")
        sec_phases(app, ctx, rs, sel, dev_dir, notes_dir)
        sec_threats(app, ctx, rs, all_rs, fr["summary"])
        front_page(md, ctx, slug, name, all_rs, rs, sel, acc, fr, drawn, figdir)

    appendix(app, ctx, dev_named)
    method_appendix(app)
    md.append("## About this report\n")
    md.append(f"Generated by `report/make_report.py` from {len(records)} run record(s) under `profiles/` on "
              f"{len(devices)} device(s) (schema v1, profiles/README.md); {len(skipped)} record(s) could not be read "
              "(named in the appendix). Do not edit by hand: `make report` rewrites it, byte for byte the same from "
              "the same records. [APPENDIX.md](APPENDIX.md) holds every point of every figure, the phases' targets "
              "and profiles, the threats to validity and the list of records.\n")

    draw_all()
    # figures of an earlier run that this run did not draw would be stale: remove ours only
    for f in sorted(os.listdir(figdir)):
        if f.endswith(".png") and "__fig" in f and f not in written:
            os.remove(os.path.join(figdir, f))
    for name_, lines in (("REPORT.md", md), ("APPENDIX.md", app)):
        text = "\n".join(lines)
        while "\n\n\n" in text:
            text = text.replace("\n\n\n", "\n\n")
        tmp = os.path.join(out, "." + name_ + ".tmp")
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out, name_))
    return records, skipped, sorted(written)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Build report/REPORT.md and report/figures/*.png from run records.")
    ap.add_argument("--profiles", default="profiles", help="folder holding <device-slug>/<phase>__<tag>.json")
    ap.add_argument("--out", default="report", help="folder for REPORT.md and figures/")
    ap.add_argument("--notes", default=os.path.join(HERE, "phase_notes"), help="per-phase prose (<phase>.md)")
    ap.add_argument("--untracked", action="store_true",
                    help="also read files git does not track (a preview before committing; default: tracked only)")
    a = ap.parse_args(argv)
    if not os.path.isdir(a.profiles):
        print(f"make_report: --profiles {a.profiles}: not a folder", file=sys.stderr)
        return 2
    try:
        os.makedirs(a.out, exist_ok=True)
        records, skipped, figs = build(a.profiles, a.out, a.notes, a.untracked)
    except OSError as e:
        print(f"make_report: cannot write the report under {a.out}: {e}", file=sys.stderr)
        return 4
    for s in sorted(skipped, key=lambda s: s.path):
        print(f"make_report: skipped {s.path}: {s.problem}", file=sys.stderr)
    print(f"make_report: {os.path.join(a.out, 'REPORT.md')} from {len(records)} record(s), "
          f"{len(skipped)} skipped, {len(figs)} figure(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
