"""The figures (1-9 and 13; 10-12 are fig_time_account). Each function takes the dict an
analysis.select_* function returned (records of one device only), draws it with matplotlib's Agg
backend and fixed settings, and writes a PNG without a timestamp or software tag, so the same
records give the same file.
"""
from __future__ import annotations

import math
import os
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.text  # noqa: E402
import matplotlib.transforms  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FixedLocator, FormatStrFormatter, MaxNLocator, NullLocator  # noqa: E402

import analysis as A  # noqa: E402

RC = {
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "legend.fontsize": 8.5,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linestyle": ":",
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "path.simplify": False,
    "svg.hashsalt": "cuda-notebook",
    "axes.axisbelow": True,
}
PNG_META = {"Software": None}


def _pin_fonts():
    """Keep only matplotlib's bundled fonts in the font list, so that a machine with its own DejaVu
    installed (another version) draws the same glyphs: PNG bytes then depend on the records only."""
    from matplotlib import font_manager  # noqa: PLC0415
    data = os.path.realpath(matplotlib.get_data_path())
    fm = font_manager.fontManager
    if not getattr(fm, "_nb_pinned", False):
        fm.ttflist = [f for f in fm.ttflist if os.path.realpath(f.fname).startswith(data)] or fm.ttflist
        fm._nb_pinned = True
        font_manager.findfont.cache_clear() if hasattr(font_manager.findfont, "cache_clear") else None
        fm._findfont_cached.cache_clear() if hasattr(fm, "_findfont_cached") else None


def _setup():
    matplotlib.rcdefaults()
    plt.rcParams.update(RC)
    _pin_fonts()


OURS_COLOR, TWIN_COLOR, JAX_COLOR = "#08519c", "#cb181d", "#006d2c"  # ours blue shades, PyTorch red, JAX green


def _label_color(key):
    return JAX_COLOR if A.is_jax(key[0]) else TWIN_COLOR if A.is_twin(key[0]) else OURS_COLOR


def _plot_runs(ax, pts, grid, same_commit=False, **kw):
    """Draws one series of (x, y, ...) points sorted by x: two neighbouring points are joined by a line
    unless a value of grid (the sweep's x values) lies between them that the series did not measure; a
    point left without a neighbour is drawn on its own. So a mode measured at a few widths shows as
    points, and no line passes through x values it never ran. same_commit: nor are two points joined
    whose records name different commits (different code: a line between them would read as a trend
    of x). A series without gaps is one plot call."""
    runs = []
    for p in pts:
        if runs and not any(runs[-1][-1][0] < x < p[0] for x in grid) and \
                not (same_commit and _point_commit(runs[-1][-1]) != _point_commit(p)):
            runs[-1].append(p)
        else:
            runs.append([p])
    label = kw.pop("label", None)
    carrier = max(range(len(runs)), key=lambda i: (len(runs[i]), -i)) if runs else 0  # the legend shows a line if any
    for i, run in enumerate(runs):
        style = dict(kw)
        if len(run) == 1:  # a point without a measured neighbour: a marker, never a line (legend too)
            style["linestyle"] = "none"
        ax.plot([p[0] for p in run], [p[1] for p in run], label=label if i == carrier else None, **style)


def _grid(series, ours_only=False):
    """The x values of a sweep: those of our series (ours_only, where there are any), else of all."""
    xs = {p[0] for k, pts in series.items() if not (ours_only and A.is_twin(k[0])) for p in pts}
    return sorted(xs) if xs else sorted({p[0] for pts in series.values() for p in pts})


def _finish(fig, path, title, device, records, extra_footer="", tight=(0, 0.035, 1, 0.96)):
    dates = A.date_range(records)
    fig.suptitle(title, fontsize=12.5, fontweight="bold", y=0.995)
    foot = f"Device: {device}   |   records dated {dates} (UTC)   |   {len(set(r.path for r in records))} record file(s)"
    if extra_footer:
        foot += "   |   " + extra_footer
    # a footer longer than the figure is wide wraps (~17 characters an inch at 8 pt), the axes making room
    width, lines = max(60, int(fig.get_figwidth() * 17)), []
    for part in foot.split("   |   "):  # whole parts on a line where they fit, a line broken between parts
        if lines and len(lines[-1]) + 7 + len(part) <= width:
            lines[-1] += "   |   " + part
        else:
            lines += textwrap.wrap(part, width, break_on_hyphens=False) or [part]
    fig.text(0.5, 0.005, "\n".join(lines), ha="center", va="bottom", fontsize=8, color="#444444")
    if tight is not None:  # (None: the figure laid itself out)
        extra = (len(lines) - 1) * 0.16 / fig.get_figheight()
        fig.tight_layout(rect=(tight[0], tight[1] + extra, tight[2], tight[3]))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fig.savefig(path, metadata=PNG_META)
    plt.close(fig)


def _ratio_words(x):
    """37.0× faster / 37.0× slower (never 0.0271×)."""
    return f"{x:.3g}× faster" if x >= 1 else f"{1 / x:.3g}× slower"


def _finding(d, fallback):
    f = d.get("finding")
    return (f[0].upper() + f[1:]) if f else fallback


def _fmt_ms(ms):
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    if ms >= 1:
        return f"{ms:.3g} ms"
    return f"{ms * 1000:.3g} µs"


def _dots(ax, ys, vals, keys, size=9):
    """A dot a row on a log axis (a bar's length there would depend on where the axis starts), the row's
    guide line faint across the axes; each path's colour and marker."""
    for y in ys:
        ax.axhline(y, color="#e4e4e4", linewidth=0.8, zorder=0)
    for y, v, k in zip(ys, vals, keys):
        ax.plot([v], [y], linestyle="none", marker=A.marker(k), markersize=size, color=A.color(k),
                markeredgecolor="#222222", markeredgewidth=0.7, zorder=3)


def _dot_labels(ax, ys, vals, texts, x0, x1, axes_in, fontsize):
    """Each dot's label on a white ground right of it, or left of it where it would run past the right
    edge and fits there (a label's width in decades of the log axis: ~0.075 in a character at 9 pt)."""
    decades_per_char = 0.075 * (fontsize / 9) * math.log10(x1 / x0) / axes_in
    for y, v, txt in zip(ys, vals, texts):
        width = decades_per_char * len(txt)
        left = math.log10(v * 1.25) + width > math.log10(x1) and math.log10(v / x0) > width + 0.2
        ax.text(v / 1.25 if left else v * 1.25, y, txt, va="center", ha="right" if left else "left", fontsize=fontsize,
                bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=0.5), zorder=4)


def fig1_ladder(d, path, device):
    _setup()
    rows = d["rows"]
    fig, ax = plt.subplots(figsize=(10, 0.55 * len(rows) + 2.0))
    ys = list(range(len(rows)))[::-1]
    vals = [r["ms"] for r in rows]
    _dots(ax, ys, vals, [r["key"] for r in rows])
    marks, mkey = commit_marks([r.get("record") for r in rows])
    ax.set_yticks(ys)
    ax.set_yticklabels([_marked(r["label"], r.get("record"), marks) for r in rows])
    ax.set_xscale("log")
    lo, hi = min(vals), max(vals)
    floors = (d.get("floors") or {}).get("lines", [])
    for f, ls in zip(floors, ("--", ":", "-.")):
        ax.axvline(f["ms"], color="black", linestyle=ls, linewidth=1.1, label=f"{f['label']}: {_fmt_ms(f['ms'])}")
        lo = min(lo, f["ms"])
    x0, x1 = lo / 3, hi * 4  # the axis ends just past the slowest row, not over empty decades
    ax.set_xlim(x0, x1)
    texts = []
    for r in rows:
        txt = _fmt_ms(r["ms"])
        if r["speedup"] is not None and not (A.is_twin(r["key"][0]) and r["key"][1] == "pytorch-eager"):
            txt += "  ·  " + _ratio_words(r["speedup"]) + " than eager"
        texts.append(txt)
    _dot_labels(ax, ys, vals, texts, x0, x1, 7.0, 9)
    if floors:  # below the axes: the rows reach the right edge at any height
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.09), fontsize=8, ncol=1, frameon=False,
                  title="rungs that keep x, y on chip run below the two reading lines", title_fontsize=8)
    ax.set_xlabel("training time, 5M points × 200 epochs (ms, median of repeats, log scale)")
    ax.set_title(textwrap.fill(_finding(d, "lower is better; label: median time against the PyTorch eager twin"), 95),
                 fontsize=9.5)
    note = "algebraic limit (not a training loop): Σx, Σy, Σx², Σxy in one pass" if floors else ""
    note = "   |   ".join(x for x in (note, mkey) if x)
    _finish(fig, path, "Figure 1 — linear regression ladder (5M × 200 epochs)", device, d["records"], note)


def fig2_scaling(d, path, device):
    _setup()
    fig, ax = plt.subplots(figsize=(10, 7))
    fell_back = []  # phase 3's default path past what fits on chip: the per-epoch graph, drawn hollow
    for k, pts in d["series"].items():
        note = (d.get("notes") or {}).get(k)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=A.marker(k), linestyle=A.linestyle(k),
                color=A.color(k), label=A.label(*k) + (f" ({note})" if note else ""), markersize=5)
        graph = [p for p in pts if len(p) > 2 and k[1] == "cuda" and
                 A.dget(p[2].data, "launch", "path") == "graph" and A.dget(p[2].data, "config", "path") == "auto"]
        if graph:
            ax.plot([p[0] for p in graph], [p[1] for p in graph], linestyle="none", marker=A.marker(k), markersize=9,
                    markerfacecolor="white", markeredgecolor=A.color(k), markeredgewidth=1.5,
                    label=f"{A.label(*k)}: data off chip, per-epoch graph")
            fell_back.append(min(p[0] for p in graph))
    for n in fell_back:
        ax.axvline(n, color="#777777", linestyle=":", linewidth=1.0)
    if d["floor"]:
        f = d["floor"]
        ax.plot([p[0] for p in f["points"]], [p[1] for p in f["points"]], color="black", linestyle="--",
                linewidth=1.3, label=f"x, y from HBM every epoch: 8 B × n_train × {f['epochs']} / {f['copy_gbps']:.0f} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of points n (log scale)")
    ax.set_ylabel("training time (ms, median of repeats, log scale)")
    ax.set_title("every implementation with a size sweep; dashed: the time to read x and y from HBM once per epoch "
                 "(a rate, not a floor:\ndata that stays in L2 or on chip runs below it); dotted: where phase 3's data "
                 "no longer fits on chip", fontsize=9.5)
    # the legend below the axes: inside, it hid the CPU twin and phase 1 at the top of the plot
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.11), ncol=2, fontsize=8.5, frameon=False)
    commits = sorted({str(A.dget(p[2].data, "git", "commit") or "?")[:7] for pts in d["series"].values()
                      for p in pts if len(p) > 2})
    _finish(fig, path, "Figure 2 — scaling with the number of points (linear regression)", device, d["records"],
            "sweep records of " + ", ".join(commits) + " (the headline runs of Figure 1 may be of another build)")


CAT_COLORS = {"forward": "#4292c6", "loss": "#fdae6b", "backward": "#e6550d", "update": "#31a354",
              "fused": "#756bb1", "eval": "#fdd0a2", "copies": "#969696", "other": "#d9d9d9"}


def fig3_breakdown(d, path, device):
    """Where a step goes, in time (not normalised): device time by kind of kernel, then the GPU's idle
    time (the timed step minus its device-busy time: host, framework, launches), for every
    implementation with an account (PyTorch modes from their `account`, ours from CUPTI)."""
    _setup()
    panels = (d.get("account") or {}).get("panels") or []
    n = len(panels)
    heights = [len(p["rows"]) for p in panels]
    fig, axes = plt.subplots(n, 1, figsize=(11, 0.42 * sum(heights) + 1.5 * n + 1.0), squeeze=False,
                             gridspec_kw={"height_ratios": [max(h, 1) + 1.2 for h in heights]})
    marks, mkey = commit_marks([r["record"] for p in panels for r in p["rows"]])
    for ax, p in zip(axes[:, 0], panels):
        rows = p["rows"]
        ys = list(range(len(rows)))[::-1]
        unit = rows[0]["unit"]
        tops = sorted((max(r["unit_ms"] or 0, r["busy_ms"] or 0) * 1e3 for r in rows), reverse=True)
        top = tops[0]
        # one bar far longer than every other (phase 1's 21 ms epoch against µs) would flatten the rest:
        # the axis stops short of it and its label says it runs off the scale
        if len(tops) > 1 and tops[1] > 0 and tops[0] > 5 * tops[1]:
            top = tops[1] * 1.6
        for y, row in zip(ys, rows):
            segs, idle, denom = account_shares(row)
            # the bar is the step: where the device time exceeds it (a profiled run slower than the timed
            # one, or kernels waiting under PDL), its kinds are scaled into the step's length
            span = row["unit_ms"] if row["unit_ms"] else denom
            left = 0.0
            for c, w in segs:
                wu = w / 100 * span * 1e3
                ax.barh(y, wu, left=left, color=ACCOUNT_COLORS[c], edgecolor="white", linewidth=0.4)
                left += wu
            iu = idle / 100 * span * 1e3
            if iu > 0:
                ax.barh(y, iu, left=left, color=ACCOUNT_IDLE, edgecolor="#999999", linewidth=0.4, hatch="//")
            busy = A.busy_pct(row)
            txt = _fmt_ms(row["unit_ms"]) if row["unit_ms"] is not None else "—"
            if busy is not None and row.get("busy_hi_ms"):  # JAX: a range (fig_time_account)
                lo_idle = max(0.0, 100 - row["busy_hi_ms"] / row["unit_ms"] * 100)
                txt += f" · idle {A.pct_text(lo_idle)}–{A.pct_text(max(0.0, 100 - busy))} (est.)"
            elif busy is not None and busy > 100:
                txt += f" · device time {A.sig3(busy / 100)}× it"
            elif busy is not None:
                txt += f" · idle {A.pct_text(max(0.0, 100 - busy))}"
            if left + iu > top * 1.35:
                ax.text(top * 1.33, y, txt + "  (bar runs off the scale)", va="center", ha="right", fontsize=8,
                        bbox=dict(facecolor="white", edgecolor="none", pad=1.0))
            else:
                ax.text(left + iu + top * 0.01, y, txt, va="center", fontsize=8)
        ax.set_yticks(ys)
        ax.set_yticklabels([_wrap_label(_marked(r["label"], r["record"], marks), 40) for r in rows], fontsize=8.5)
        for t, r in zip(ax.get_yticklabels(), rows):
            t.set_color(_label_color(r["key"]))
        ax.set_xlim(0, top * 1.35)
        ax.set_xlabel(f"µs per {unit}: device time by kind of kernel, then GPU idle (host, framework, launches)")
        ax.set_title(p["title"], fontsize=9.5)
    handles = [Patch(color=ACCOUNT_COLORS[c], label=c) for c in A.ACCOUNT_CATEGORIES] + \
        [Patch(facecolor=ACCOUNT_IDLE, edgecolor="#999999", hatch="//", label="GPU idle (host / framework)")]
    axes[0, 0].legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 1.12), ncol=len(handles),
                      frameon=False, fontsize=8)
    fig.text(0.5, 0.955, _finding(d, ""), ha="center", fontsize=9)
    _finish(fig, path, "Figure 3 — where a step goes: device time and the idle (host) part, every implementation",
            device, [r["record"] for p in panels for r in p["rows"]], "labels: blue ours, red PyTorch" +
            (", green JAX" if any(A.is_jax(r["key"][0]) for p in panels for r in p["rows"]) else "") +
            (f"   |   {mkey}" if mkey else ""), tight=(0, 0.035, 1, 0.94))


def fig4_timeline(d, path, device):
    _setup()
    rows = d["rows"]
    t0, t1 = d["t0"], d["t1"]
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(rows) + 2.4))
    names_by_time = {}
    for e in d["events"]:
        if not A._is_copy(e) and not A._is_host(e, d["pnames"]):
            names_by_time[e["name"]] = names_by_time.get(e["name"], 0.0) + e["dur"]
    top = [n for n, _ in sorted(names_by_time.items(), key=lambda kv: (-kv[1], kv[0]))[:6]]
    kcols = ["#4292c6", "#756bb1", "#31a354", "#8c6d31", "#de2d26", "#17becf"]  # no oranges: copies are orange
    colmap = {n: kcols[i] for i, n in enumerate(top)}
    ys = {row: len(rows) - 1 - i for i, row in enumerate(rows)}
    used = {}
    tiny = False
    for e in d["events"]:
        row = (e["pid"], e["tid"])
        a = max(e["ts"], t0) - t0
        b = min(e["ts"] + e["dur"], t1) - t0
        if b <= a:
            continue
        if A._is_host(e, d["pnames"]):
            c, lab = "#bdbdbd", "host NVTX range"
        elif A._is_copy(e):
            low = (e["name"] + e["cat"]).lower()
            c, lab = ("#fdd0a2", "memset") if "memset" in low else ("#e6550d", "copy " + (
                "HtoD" if "htod" in low else "DtoH" if "dtoh" in low else "DtoD" if "dtod" in low else ""))
            c = "#a63603" if lab == "copy DtoH" else c
        else:
            c = colmap.get(e["name"], "#9e9ae6")
            lab = _short(e["name"]) if e["name"] in colmap else "other kernels"
        ax.broken_barh([(a, b - a)], (ys[row] - 0.35, 0.7), facecolors=c, edgecolor="#333333", linewidth=0.3)
        if not A._is_host(e, d["pnames"]) and not A._is_copy(e) and (b - a) < 0.006 * (t1 - t0):
            # too thin to see at this scale: mark where it runs (its width stays true)
            ax.plot([(a + b) / 2], [ys[row] + 0.47], marker="v", color=c, markersize=6, markeredgecolor="#333333",
                    markeredgewidth=0.4, linestyle="none", clip_on=False)
            tiny = True
        used.setdefault(lab, c)
    ax.set_yticks([ys[r] for r in rows])
    ax.set_yticklabels([_short(d["row_names"][r], 34) for r in rows])
    ax.set_xlim(0, (t1 - t0) * 1.02)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel("time since the first GPU activity of the window (µs; trace clock)" +
                  ("   ▼ marks a kernel too short to see at this scale" if tiny else ""))
    ax.set_title(f"window: the burst of GPU activity up to the end of the first `{_short(d['epoch_kernel'], 40)}` "
                 f"(the most-launched kernel, {d['epoch_kernel_calls']} launches)", fontsize=9)
    handles = [Patch(color=c, label=l) for l, c in sorted(used.items())]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16 - 0.02 * (4 - min(len(rows), 4))),
              ncol=min(4, len(handles)), frameon=False)
    _finish(fig, path, "Figure 4 — phase 3 timeline excerpt (our CUPTI Chrome trace)", device, d["records"],
            f"trace: {os.path.basename(d['trace'])}")


def _pow2_ticks(ax, xs):
    xs = sorted(set(xs))
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{x:,}" for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())


def _short(s, n=48):
    return s if len(s) <= n else s[: n - 1] + "…"


def _wrap_label(s, n=40):
    """A row label of at most two lines of n characters (the second cut short with … only past that),
    never a label cut at n: '--pdl o…' hid which way the ablation ran."""
    if len(s) <= n:
        return s
    head, sep, tail = s.partition(" (")  # a parenthesis kept whole on the second line where both fit
    if sep and len(head) <= n and len(tail) + 1 <= n:
        return head + "\n(" + tail
    lines = textwrap.wrap(s, n, break_on_hyphens=False) or [s]
    return lines[0] if len(lines) == 1 else lines[0] + "\n" + _short(" ".join(lines[1:]), n)


COMMIT_MARKS = "†‡§¶#"


def _commit(r):
    return str(A.dget(r.data, "git", "commit") or "?")[:7] if r is not None and hasattr(r, "data") else "?"


def _point_commit(p):
    """The commit of a point (x, y, record, ...)'s record ("?" where it carries none)."""
    return _commit(p[2] if len(p) > 2 else None)


def commit_marks(records):
    """Rows of one figure measured at different commits are different runs (other code, another process):
    ({commit: mark}, footer key). The commit of the most rows is left unmarked, every other commit gets a
    mark of its own (†, ‡, …); one commit: no marks and no key (nothing is mixed)."""
    counts = {}
    for r in records:
        c = _commit(r)
        counts[c] = counts.get(c, 0) + 1
    if not counts:
        return {}, ""
    order = sorted(counts, key=lambda c: (-counts[c], c))
    if len(order) == 1:
        return {order[0]: ""}, ""
    marks = {order[0]: ""}
    for i, c in enumerate(order[1:]):
        marks[c] = COMMIT_MARKS[i] if i < len(COMMIT_MARKS) else f"[{i + 1}]"
    key = (f"rows measured at commit {order[0]}; " + ", ".join(f"{marks[c]} at {c}" for c in order[1:]) +
           " (another commit: another run)")
    return marks, key


def _marked(label, r, marks):
    m = marks.get(_commit(r), "")
    return f"{label} {m}" if m else label


def fig5_w1(d, path, device):
    _setup()
    rows = d["rows"]
    # the times' labels in a column of their own between the two panels (beside a dot on a log axis they
    # would need decades of empty axis to the right)
    fig, (ax, axl, ax2) = plt.subplots(1, 3, figsize=(14.5, 0.45 * len(rows) + 3.2),
                                       gridspec_kw={"width_ratios": [1.35, 0.25, 1]})
    axl.axis("off")
    ys = list(range(len(rows)))[::-1]
    vals = [r["epoch_ms"] for r in rows]
    _dots(ax, ys, vals, [r["key"] for r in rows], size=8)
    texts = []
    for r in rows:
        txt = _fmt_ms(r["epoch_ms"])
        if r["speedup"] is not None and not (A.is_twin(r["key"][0]) and r["key"][1] == "pytorch-eager"):
            txt += " · " + _ratio_words(r["speedup"]) + " than eager"  # (eager against itself: no ratio)
        texts.append(txt)
    marks, mkey = commit_marks([r.get("record") for r in rows])
    ax.set_yticks(ys)
    ax.set_yticklabels([_marked(r["label"], r.get("record"), marks) for r in rows])
    ax.set_xscale("log")
    ax.set_xlim(min(vals) / 2, max(vals) * 2)
    for y, txt in zip(ys, texts):
        ax.text(1.03, y, txt, va="center", ha="left", fontsize=8.5, transform=ax.get_yaxis_transform(), clip_on=False)
    ax.set_xlabel("time per epoch (ms, log scale; median total / epochs)")
    ax.set_title(_finding(d, "training time per epoch (lower is better)"), fontsize=9.5)
    # final test accuracy: the seed study's mean with its min-max over seeds where it exists, else the W1 run's
    seeds = {s_["key"]: s_ for s_ in d.get("seeds") or []}
    acc_rows = []
    for r in rows:
        s_ = seeds.get(r["key"])
        if s_ and len(s_["accs"]) >= 2:
            a = [x for _, x, _ in s_["accs"]]
            acc_rows.append((r["label"], r["key"], s_["mean"], min(a), max(a), len(a)))
        elif r["final_acc"] is not None:
            acc_rows.append((r["label"], r["key"], r["final_acc"], None, None, 1))
    if acc_rows:
        yy = list(range(len(acc_rows)))[::-1]
        for y, (lab, k, m, lo, hi, n) in zip(yy, acc_rows):
            xerr = [[m - lo], [hi - m]] if lo is not None else None
            ax2.errorbar([m], [y], xerr=xerr, fmt=A.marker(k), color=A.color(k), markeredgecolor="#222222",
                         capsize=4, markersize=7)
            ax2.text(1.02, y, f"{m:.2f}%" + (f" (min–max of {n} seeds)" if n > 1 else " (one run)"),
                     va="center", fontsize=8, transform=ax2.get_yaxis_transform())
        ax2.set_yticks(yy)
        ax2.set_yticklabels([a[0] for a in acc_rows], fontsize=8)
        lo_ = min((a[3] if a[3] is not None else a[2]) for a in acc_rows)
        hi_ = max((a[4] if a[4] is not None else a[2]) for a in acc_rows)
        pad = max(0.1, (hi_ - lo_) * 0.3)
        ax2.set_xlim(lo_ - pad, hi_ + pad)
        ax2.set_xlabel("final test accuracy (%): mean, min–max over seeds where measured")
        ax2.set_title("final accuracy (seed spread where measured)", fontsize=9.5)
    else:
        ax2.text(0.5, 0.5, "no record holds metrics.test_accuracy", ha="center", transform=ax2.transAxes)
    _finish(fig, path, "Figure 5 — MLP W1 (784-128-64-10, batch 32, Adam, dropout 0.2)", device, d["records"],
            mkey)


def hidden_under(series, within=0.03):
    """{key: (the key drawn over it, largest relative difference)} for each series whose every point lies
    within `within` of a series drawn after it at the same x values: its line and markers are covered, so
    its legend entry says where it is (else it reads as a series missing from the plot)."""
    keys = list(series)
    out = {}
    for i, k in enumerate(keys):
        a = {p[0]: p[1] for p in series[k]}
        for k2 in keys[i + 1:]:
            b = {p[0]: p[1] for p in series[k2]}
            if len(a) >= 1 and set(a) == set(b) and all(b[x] for x in a):
                gap = max(abs(a[x] - b[x]) / abs(b[x]) for x in a)
                if gap <= within:
                    out[k] = (k2, gap)
                    break
    return out


def fig6_w2(d, path, device):
    _setup()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(13, 6.4))
    grid = A.W2_HS  # a mode measured at a few of the sweep's widths only: points, not lines through the others
    under = hidden_under(d["series"])
    for k, pts in d["series"].items():
        lab = A.label(*k)
        if k in under:
            lab += f" (drawn under {A.label(*under[k][0])}: within {under[k][1] * 100:.2g}%)"
        _plot_runs(ax, pts, grid, marker=A.marker(k), color=A.color(k),
                   linestyle=A.linestyle(k), label=lab, markersize=5)
    floor = (d.get("floor") or {}).get("points") or []
    if floor:
        ax.plot([p[0] for p in floor], [p[1] for p in floor], color="0.45", linestyle=":", linewidth=1.4,
                label=textwrap.fill("floor of " + d["floor"]["label"], 60))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("hidden width h (784-h-h-h-10, log2 scale)")
    ax.set_ylabel("time per step (ms, median total / steps, log scale)")
    ax.set_title("time per training step (lower is better)", fontsize=9.5)
    _pow2_ticks(ax, [p[0] for pts in d["series"].values() for p in pts])
    # hollow: a ratio whose two records were measured at different commits (different runs)
    best = d.get("twin_best") or {}
    other_run = False
    for k, pts in d["rel"].items():
        _plot_runs(ax2, pts, grid, marker=A.marker(k), color=A.color(k), label=A.label(*k), markersize=5)
        ours = {p[0]: p[2] for p in d["series"].get(k, []) if len(p) > 2}
        apart = [p for p in pts if p[0] in ours and p[0] in best and _commit(ours[p[0]]) != _commit(best[p[0]][2])]
        if apart:
            other_run = True
            ax2.plot([p[0] for p in apart], [p[1] for p in apart], linestyle="none", marker=A.marker(k), markersize=5,
                     markerfacecolor="white", markeredgecolor=A.color(k), zorder=4)
    if other_run:
        ax2.plot([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="#555555",
                 label="hollow: ours and the framework mode it is divided by measured at different commits (different runs)")
    ax2.axhline(1.0, color="black", linewidth=1.2, linestyle="--", label="parity with the fastest framework")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log")
    ax2.yaxis.set_major_formatter(FormatStrFormatter("%g"))  # 0.6, 1, 2 rather than 6×10⁻¹
    ax2.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax2.tick_params(axis="y", which="minor", labelsize=7.5)
    lo2, hi2 = ax2.get_ylim()  # labelled ticks across the range, parity and the claims above it included
    ticks = [t for t in (0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.25, 1.5, 2, 3, 5, 7, 10, 20, 50, 100) if lo2 <= t <= hi2]
    if len(ticks) >= 2:
        ax2.yaxis.set_major_locator(FixedLocator(ticks))
        ax2.yaxis.set_minor_locator(NullLocator())
    ax2.set_ylabel("fastest framework mode's time / ours (×, log)")
    ax2.set_title("relative speed (above 1: ours faster than every framework mode)", fontsize=9.5)
    _pow2_ticks(ax2, [p[0] for pts in d["series"].values() for p in pts])
    # the baseline changes with the width where another mode is fastest (or the fastest one was not run
    # there): each width names its own under the tick, so a step in a curve is never read as ours alone
    hs2 = sorted({p[0] for pts in d["series"].values() for p in pts})
    ax2.set_xticklabels([f"{h:,}" + ("\n" + "\n".join(textwrap.wrap(A.label(*best[h][1]), 14, break_on_hyphens=False))
                                     if h in best else "") for h in hs2], fontsize=7.5)
    ax2.set_xlabel("hidden width h (log2 scale); below it, the divisor: the fastest framework mode there")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    seen = set(l1)
    hs = h1 + [h for h, l in zip(h2, l2) if l not in seen]
    ls = l1 + [l for l in l2 if l not in seen]
    fig.legend(hs, ls, loc="lower center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, 0.03))
    singles = [A.label(*k) for k, pts in d["series"].items() if len(pts) == 1]
    fig.text(0.5, 0.925, textwrap.fill(_finding(d, "") + (f"   (one width only: {', '.join(singles)})" if singles
                                                         else ""), 150),
             ha="center", va="top", fontsize=9)
    commits = sorted({_commit(p[2]) for pts in d["series"].values() for p in pts if len(p) > 2})
    _finish(fig, path, "Figure 6 — MLP W2 width sweep (batch 32, SGD; fp16 and fp32 paths as labelled)", device,
            d["records"], ("points of " + str(len(commits)) + " commits: " + ", ".join(commits) if len(commits) > 1 else
                           "every point measured at commit " + commits[0] if commits else ""),
            tight=(0, 0.25, 1, 0.88))


def fig7_losses(d, path, device):
    _setup()
    panels = d["panels"]
    # a row under the panels for the legends of panels whose curves fill their axes (see below)
    leg_in = 0.15 * max((len(p["curves"]) for p in panels), default=0) + 0.2
    fig, axes = plt.subplots(3, len(panels), figsize=(6.8 * len(panels), 7.0 + leg_in), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 1.4, leg_in / (7.0 / 4.4)]})
    for col, p in enumerate(panels):
        ax, axd = axes[0, col], axes[1, col]
        unit = "step"
        ref = p["curves"].get(p["ref"]) if p["ref"] else None
        refm = dict(zip(ref[0], ref[1])) if ref else {}
        all_gaps = {**p["gaps"], **p.get("twin_gaps", {})}
        for k, c in p["curves"].items():
            xs, ys, unit = c
            lab = A.label(*k)
            if k in all_gaps:
                g, x, shared, own_last = all_gaps[k][:4]
                lab += " (identical" if g == 0 else f" (max rel. gap {g * 100:.3g}% at {unit} {x}"
                lab += f"; to {unit} {shared} only)" if shared < own_last else ")"
            elif k == p["ref"]:
                lab += " (reference)"
            ax.plot(xs, ys, color=A.color(k), linestyle="--" if A.is_twin(k[0]) else "-",
                    linewidth=1.1, label=lab, alpha=0.9)
            if ref and k != p["ref"]:
                dx = [x for x in xs if refm.get(x)]
                dy = [(y - refm[x]) / abs(refm[x]) * 100 for x, y in zip(xs, ys) if refm.get(x)]
                axd.plot(dx, dy, color=A.color(k), linestyle="--" if A.is_twin(k[0]) else "-", linewidth=1.0)
        # Where the reference's log is much shorter than ours, draw the range both logged (the range
        # the gaps are measured over), not a long tail of ours that nothing is compared with.
        clip, longest = None, max(max(c[0]) for c in p["curves"].values())
        if ref and longest > 1.5 * max(ref[0]):
            clip = max(ref[0])
            span = max(clip - min(ref[0]), 1)
            ax.set_xlim(min(ref[0]) - 0.03 * span, clip + 0.03 * span)
            vis = [y for c in p["curves"].values() for x, y in zip(c[0], c[1]) if x <= clip and y > 0]
            if vis:  # the curves in the top quarter, the legend (lower left) below them
                lo, hi = min(vis), max(vis)
                pad = max(hi / lo - 1, 1e-3)
                ax.set_ylim(lo / (1 + 8 * pad), hi * (1 + pad))
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
        ax.tick_params(axis="y", which="minor", labelsize=7.5)
        ax.set_ylabel("train loss (cross-entropy, log scale)")
        ax.set_title(p["title"] + " — ours solid, frameworks dashed" +
                     (f"\n(drawn to {unit} {clip:,}, where the reference's log ends; the longest of ours runs to "
                      f"{longest:,})" if clip else
                      "\n(\"to step N only\": the reference curve ends there; the gap is over the steps both logged)"
                      if any(g[2] < g[3] for g in p["gaps"].values()) else ""), fontsize=9.5)
        axl = axes[2, col]
        axl.axis("off")
        if clip:  # the curves in the top quarter (ylim above): the legend fits below them
            ax.legend(loc="lower left", fontsize=7)
        else:  # the curves fill the axes (W1's fall from 2 to 0.03): a legend inside covered a stretch of them
            axl.legend(*ax.get_legend_handles_labels(), loc="upper center", fontsize=7.5, ncol=1, frameon=False)
        axd.axhline(0.0, color="black", linewidth=0.8)
        axd.set_xlabel(f"training {unit}" + (f" (each point: mean loss of {p['window']} steps from there)"
                                                if p.get("window") else ""))
        axd.set_ylabel("vs reference (%)")
        axd.set_title("relative difference to the reference curve: (loss − reference) / reference", fontsize=8.5)
        if not ref:
            axd.text(0.5, 0.5, "no PyTorch curve to compare with", ha="center", transform=axd.transAxes)
    _finish(fig, path, "Figure 7 — loss curves, ours against the framework twins", device, d["records"])


def _text_box(ann, renderer):
    """The box of an annotation's text alone, without its leader line, in pixels."""
    ann.update_positions(renderer)
    return matplotlib.text.Text.get_window_extent(ann, renderer)


def _place_numbers(fig, ax, pts, texts, fontsize=7.5):
    """Writes texts[i] beside point pts[i] (data coordinates), each at the first of a ring of offsets
    (nearest first) where its box overlaps no marker and no number placed before it, and, on the first
    ring, lies nearer its own point than any other; a number moved off the first ring gets a thin leader
    line to its point. Returns the annotations."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    to_px = ax.transData.transform
    r_mark = 5.5 * fig.dpi / 72  # a marker of s = 55 (points²) has a radius of ~4 points; with its edge
    marks = []
    for x, y in pts:
        px, py = to_px((x, y))
        marks.append(matplotlib.transforms.Bbox.from_extents(px - r_mark, py - r_mark, px + r_mark, py + r_mark))
    dirs = [(1, 0.35), (-1, 0.35), (1, -1), (-1, -1), (0, 1.3), (0, -1.6), (1, 1), (-1, 1),
            (0.5, 1.2), (-0.5, 1.2), (0.5, -1.4), (-0.5, -1.4)]
    cands = [(dx * r, dy * r) for r in (6, 11, 17, 24, 32, 42, 54) for dx, dy in dirs]
    placed, anns = [], []
    order = sorted(range(len(pts)), key=lambda i: (-pts[i][1], pts[i][0], i))
    for i in order:
        choice = None
        for dx, dy in cands:
            trial = ax.annotate(texts[i], pts[i], fontsize=fontsize, xytext=(dx, dy), textcoords="offset points",
                                ha="left" if dx > 0 else "right" if dx < 0 else "center", va="center")
            box = _text_box(trial, renderer).expanded(1.1, 1.1)
            trial.remove()
            inside = ax.get_window_extent(renderer).contains(box.x0, box.y0) and \
                ax.get_window_extent(renderer).contains(box.x1, box.y1)
            near = (dx, dy) in cands[:len(dirs)]  # no leader line: the number must lie nearest its own point
            cx, cy = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
            dist = [math.hypot(cx - (m.x0 + m.x1) / 2, cy - (m.y0 + m.y1) / 2) for m in marks]
            if inside and not any(box.overlaps(b) for b in placed + marks) and \
                    (not near or dist[i] <= min(dist)):
                choice = (dx, dy)
                break
        dx, dy = choice or cands[0]
        far = (dx, dy) not in cands[:len(dirs)]
        ann = ax.annotate(texts[i], pts[i], fontsize=fontsize, xytext=(dx, dy), textcoords="offset points",
                          ha="left" if dx > 0 else "right" if dx < 0 else "center", va="center", fontweight="bold",
                          bbox=dict(boxstyle="square,pad=0.05", facecolor="white", edgecolor="none", alpha=0.8),
                          arrowprops=dict(arrowstyle="-", color="#888888", linewidth=0.6, shrinkA=0, shrinkB=3)
                          if far else None, zorder=4)
        placed.append(_text_box(ann, renderer))
        anns.append((i, ann))
    return [a for _, a in sorted(anns, key=lambda t: t[0])]


def fig8_efficiency(d, path, device):
    """Key kernels against the roofs. Each point carries a number beside it, placed clear of every marker
    and other number; the legend entry of its implementation lists the numbers with the kernel names."""
    _setup()
    fig, ax = plt.subplots(figsize=(11, 6.4))
    pts = [p for p in d["points"] if p["ai"] and p["tflops"]]
    ais = [p["ai"] for p in pts]
    bw, fp, fp32 = d["copy_gbps"], d["fp16_tflops"], d.get("fp32_tflops")
    lo, hi = min(ais) / 4, max(ais) * 4
    if bw and fp:  # show the ridge point where the bandwidth roof meets the compute roof
        ridge = fp * 1000 / bw
        lo, hi = min(lo, ridge / 4), max(hi, ridge * 4)
    import numpy as np
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    if bw:
        ax.plot(xs, xs * bw / 1000, color="black", linewidth=1.2, linestyle="--",
                label=f"measured HBM copy bandwidth {bw:.0f} GB/s (a point above it keeps its data on chip)")
    if fp:
        ax.axhline(fp, color="#333333", linewidth=1.2, linestyle="-.",
                   label=f"measured fp16 tensor-core peak {fp:.0f} TFLOP/s (roof of fp16 kernels: filled)")
    if fp32:
        ax.axhline(fp32, color="#777777", linewidth=1.2, linestyle=":",
                   label=f"nominal fp32 peak {fp32:.0f} TFLOP/s (roof of fp32 kernels: hollow)")
    keys = list(dict.fromkeys(p["key"] for p in pts))
    num = {id(p): i + 1 for i, p in enumerate(sorted(pts, key=lambda q: keys.index(q["key"])))}
    for k in keys:
        mine = [p for p in pts if p["key"] == k]
        r = mine[0]["record"]
        prec = str(r.config.get("precision") or ("fp16" if "fp16" in k[1] else "fp32"))
        c = A.color(k)
        names = "   ".join((f"{num[id(p)]} " + _short(A.base_kernel_name(p["kernel"]) or p["kernel"], 28))
                           .replace(" ", "\u00a0") for p in mine)  # a number and its name never split apart
        commit = str(A.dget(r.data, "git", "commit") or "")[:7]
        lab = A.label(*k) + f" ({r.tag}{', ' + commit if commit else ''})\n" + textwrap.fill(names, 78, initial_indent="    ",
                                                                     subsequent_indent="    ", break_on_hyphens=False)
        ax.scatter([p["ai"] for p in mine], [p["tflops"] for p in mine], facecolors=c if prec == "fp16" else "white",
                   edgecolors=c, marker=A.marker(k), s=55, linewidth=1.6, label=lab, zorder=3)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved, log scale)")
    ax.set_ylabel("achieved TFLOP/s (log scale)")
    ax.set_title(textwrap.fill(_finding(d, "key kernels of each phase against the measured ceilings (roofline)"), 130),
                 fontsize=9.5, loc="left")  # from the axes' left edge, over the legend's column: two lines at most
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7.5, frameon=False, labelspacing=0.7)
    fig.tight_layout(rect=(0, 0.035, 1, 0.96))  # the layout _finish keeps, so the numbers are placed on it
    _place_numbers(fig, ax, [(p["ai"], p["tflops"]) for p in pts], [str(num[id(p)]) for p in pts])
    _finish(fig, path, "Figure 8 — efficiency: achieved throughput against the roofs", device, d["records"])


def batch_finding(series):
    """Where the fastest framework mode of the sweep (PyTorch or JAX, named) overtakes phase 5, from the
    points themselves."""
    ours = dict((p[0], p[1]) for p in series.get(A.BATCH_DEFAULT, []))  # phase 5's default path
    twin, who = {}, {}
    for k, pts in series.items():
        if A.is_fp32_yardstick(k):
            for p in pts:
                if p[1] > twin.get(p[0], 0.0):
                    twin[p[0]], who[p[0]] = p[1], A.framework(k[0])
    both = sorted(b for b in ours if b in twin)
    if not both:
        return "samples per second against the batch size (higher is better)"
    over = [b for b in both if twin[b] > ours[b]]
    if len(both) == 1:
        b = both[0]
        return (f"at batch {b:,}, the one batch size both ran, phase 5 trains {ours[b] / twin[b]:.3g}x as fast as the "
                f"fastest {who[b]} mode")
    if not over:
        names = " and ".join(n for n in ("PyTorch", "JAX") if n in {who[b] for b in both})
        return (f"phase 5 trains faster than {names} at every batch size from {both[0]:,} to {both[-1]:,} "
                f"({ours[both[0]] / twin[both[0]]:.3g}x at {both[0]:,}, {ours[both[-1]] / twin[both[-1]]:.3g}x at {both[-1]:,})")
    head = f"phase 5 is {ours[both[0]] / twin[both[0]]:.3g}x {who[both[0]]} at batch {both[0]:,}; "
    last = both[-1]
    if last in over:  # a framework is ahead at the largest batch: by how much
        tail = f"({twin[last] / ours[last]:.3g}x at {last:,}, {who[last]}): big batches are big GEMMs"
    else:  # phase 5 is ahead again at the largest batch
        tail = f"(phase 5 {ours[last] / twin[last]:.3g}x {who[last]} at {last:,})"
    if over == both[both.index(over[0]):] and len({who[b] for b in over}) == 1:  # one framework, every batch from there on
        return head + f"from batch {over[0]:,} on {who[over[0]]} trains faster " + tail
    return head + "faster than phase 5: " + ", ".join(f"{who[b]} at {b:,}" for b in over) + " " + tail


def older_commit_points(pts):
    """The points (x, y, record) whose record's commit is not that of the series' newest record."""
    recs = [p for p in pts if len(p) > 2 and hasattr(p[2], "data")]
    if not recs:
        return []
    newest = _point_commit(max(recs, key=lambda p: p[2].utc_time))
    return [p for p in recs if _point_commit(p) != newest]


def other_run_points(pts, commit):
    """The points (x, y, record) of a framework series whose record was not made at `commit` (the
    sweep's newest phase 5 commit, as _commit gives it): measured in another run."""
    return [p for p in pts if len(p) > 2 and hasattr(p[2], "data") and commit is not None
            and _point_commit(p) != commit]


# Figure 9 draws phase 5's forced paths beside its default, all in purples: a marker of its own each (with the
# shared "o" four of them could only be told apart by shade), and a framework's TF32 run a marker other than its
# fp32 run's square (same colour: the same mode; measured at a few batches, its dotted line is never drawn).
_BATCH_MARKERS = {("phase5_batched", "cuda-tile"): "v", ("phase5_batched", "cuda-tf32x3"): "^",
                  ("phase5_batched", "cuda-cublaslt-fp16"): "p", ("phase5_batched", "cuda-fp16-mma"): "<",
                  ("phase5_batched", "cuda-fma"): ">"}


def batch_marker(key):
    if key in _BATCH_MARKERS:
        return _BATCH_MARKERS[key]
    if A.is_twin(key[0]) and not A.is_fp32_yardstick(key):
        return "h"
    return A.marker(key)


def fig9_batch(d, path, device):
    _setup()
    fig, ax = plt.subplots(figsize=(10, 8.2))
    grid = _grid(d["series"], ours_only=True)  # the batch sizes of our sweep
    w1 = d.get("from_w1") or set()
    ours = [p for k, pts in d["series"].items() if not A.is_twin(k[0]) for p in pts if len(p) > 2 and hasattr(p[2], "data")]
    sweep = _point_commit(max(ours, key=lambda p: p[2].utc_time)) if ours else None
    older = other = False
    for k, pts in d["series"].items():
        main = k == A.BATCH_DEFAULT  # the default path: the line the finding is about
        _plot_runs(ax, pts, grid, same_commit=True, marker=batch_marker(k), color=A.color(k), linestyle=A.linestyle(k),
                   label=A.label(*k) + (" (its W1 run)" if k in w1 else "") + (" — the default" if main else ""),
                   markersize=7 if main else 5, linewidth=2.6 if main else 1.5, zorder=3 if main else 2)
        # hollow: our points measured on an older commit than the series' newest record (other code), a
        # framework's points measured in another run than the sweep's newest
        if A.is_twin(k[0]):
            old = other_run_points(pts, sweep)
            other = other or bool(old)
        else:
            old = older_commit_points(pts)
            older = older or bool(old)
        if old:
            ax.plot([p[0] for p in old], [p[1] for p in old], linestyle="none", marker=batch_marker(k), markersize=5,
                    markerfacecolor="white", markeredgecolor=A.color(k), zorder=4)
    if older or other:
        what = " and ".join(w for w, on in (("phase 5 measured on an older commit than its newest point (lines join "
                                              "only the points of one commit)", older),
                                             ("a framework measured in another run than the sweep's newest", other)) if on)
        ax.plot([], [], linestyle="none", marker="o", markerfacecolor="white", markeredgecolor="#555555",
                label=textwrap.fill("hollow: " + what, 100))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (samples per step, log2 scale)")
    ax.set_ylabel("training throughput (samples/s, log scale)")
    ax.set_title(textwrap.fill(batch_finding(d["series"]), 110), fontsize=9.5)
    _pow2_ticks(ax, [p[0] for pts in d["series"].values() for p in pts])
    # below the axes: with a dozen series, a legend inside covered the small batches' points
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1, fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.08, right=0.97, top=0.9, bottom=0.36)
    _finish(fig, path, "Figure 9 — phase 5 batch-size sweep", device, d["records"], tight=None)


ACCOUNT_COLORS = {"gemm": "#2171b5", "elementwise": "#6baed6", "optimizer": "#31a354", "reduction": "#fd8d3c",
                  "copy": "#969696", "other": "#9e9ac8"}
ACCOUNT_IDLE = "#f0f0f0"


def account_shares(row):
    """(segments [(class, % of the bar)], idle %, denominator ms) of one where-the-time-goes row: the
    bar is the step (unit) time, or the busy time where that is longer; the classes share the busy
    time in proportion to their device time (equal to it where nothing overlapped)."""
    unit, busy, dev = row["unit_ms"], row["busy_ms"], row["device_ms"]
    denom = max(unit or 0.0, busy or 0.0)
    if not denom:
        return [], 0.0, 0.0
    scale = (busy / dev) if (busy is not None and dev) else 1.0
    segs = [(c, row["cats"][c] * scale / denom * 100) for c in A.ACCOUNT_CATEGORIES if row["cats"].get(c)]
    idle = max(0.0, (unit or 0.0) - (busy or 0.0)) / denom * 100
    return segs, idle, denom


def fig_time_account(panel, path, device, title):
    _setup()
    rows = panel["rows"]
    fig, ax = plt.subplots(figsize=(11, 0.5 * len(rows) + 2.3))
    ys = list(range(len(rows)))[::-1]
    for y, row in zip(ys, rows):
        segs, idle, _ = account_shares(row)
        left = 0.0
        for c, w in segs:
            ax.barh(y, w, left=left, color=ACCOUNT_COLORS[c], edgecolor="white", linewidth=0.4)
            if w >= 8:
                ax.text(left + w / 2, y, A.pct_text(w), ha="center", va="center", fontsize=7.5)
            left += w
        est = bool(row.get("busy_hi_ms"))  # JAX: the idle drawn is the most its range allows
        if idle > 0:
            ax.barh(y, idle, left=left, color=ACCOUNT_IDLE, edgecolor="#999999", linewidth=0.4,
                    hatch=".." if est else "//")
            if idle >= 8:
                ax.text(left + idle / 2, y, ("≤ " if est else "") + A.pct_text(idle), ha="center", va="center",
                        fontsize=7.5, color="#444444")
        txt = _fmt_ms(row["unit_ms"]) if row["unit_ms"] is not None else "—"
        share = A.busy_pct(row)
        if share is not None and row.get("busy_hi_ms"):  # JAX: a range, the bar drawn at its low end
            txt += f" · GPU busy {A.pct_text(share)}–{A.pct_text(row['busy_hi_ms'] / row['unit_ms'] * 100)} (est.)"
        elif share is not None:  # over 100%: the busy time exceeds the step (report: BUSY_OVER_NOTE), never a share
            txt += (f" · GPU busy {A.pct_text(share)}" if share <= 100 else
                    f" · busy all ({A.sig3(share / 100)}× device time)")
        ax.text(101.5, y, txt, va="center", fontsize=8.5)
    marks, mkey = commit_marks([row["record"] for row in rows])
    ax.set_yticks(ys)
    ax.set_yticklabels([_wrap_label(_marked(row["label"], row["record"], marks), 44) for row in rows])
    ax.set_xlim(0, 150)
    ax.set_xticks([0, 20, 40, 60, 80, 100])
    unit = rows[0]["unit"] if rows else "step"
    over = any((A.busy_pct(row) or 0) > 100 for row in rows)
    est = any(row.get("busy_hi_ms") for row in rows)
    ax.set_xlabel(f"share of the {unit}'s time (%): device time by kind of kernel, then the GPU's wait\n"
                  f"(right of the bars: time per {unit}" +
                  ")" + (f"\n\"N× device time\": the profiled or traced run's device time is N× the timed {unit}; "
                         "its bar shows that device time" if over else "") +
                  ("\n(est.), dotted: JAX's profiled run is longer than its timed one; its busy share lies between that "
                   "run's share (the bar)\nand the run's device time over the timed unit, so the idle drawn is the most "
                   "the range allows" if est else ""))
    ax.set_title("kernels classified by name (see report); hatched: step time minus device-busy time "
                 "(host, framework, launch gaps)", fontsize=9)
    handles = [Patch(color=ACCOUNT_COLORS[c], label=c) for c in A.ACCOUNT_CATEGORIES] + \
        [Patch(facecolor=ACCOUNT_IDLE, edgecolor="#999999", hatch="//", label="GPU idle")]
    ax.legend(handles=handles, loc="upper center",
              bbox_to_anchor=(0.5, (-0.28 if len(rows) < 5 else -0.16) - (0.08 if est else 0)),
              ncol=len(handles), frameon=False)
    _finish(fig, path, title, device, [row["record"] for row in rows], "timed medians; device time from profiler runs" +
            (f"   |   {mkey}" if mkey else ""))


# figure 13: ours in blues (darker up the ladder), cuBLASLt in greys; TF32 dashed with hollow markers
GEMM_STYLE = {
    "own-tile": dict(color="#6baed6", marker="o", linestyle="-", linewidth=1.6),
    "own-fma64": dict(color="#3182bd", marker="^", linestyle="-", linewidth=1.6),
    "own-tf32x3": dict(color="#08519c", marker="s", linestyle="-", linewidth=1.6),
    "own-i8-digits": dict(color="#08306b", marker="X", linestyle="-", linewidth=1.6),
    "cublaslt-fp32": dict(color="#252525", marker="D", linestyle="-", linewidth=2.2),
    "cublaslt-tf32": dict(color="#737373", marker="D", linestyle="--", linewidth=1.4, markerfacecolor="white"),
    "own-tile-wmma": dict(color="#6baed6", marker="o", linestyle="-", linewidth=1.6),
    "own-f16-mma": dict(color="#08306b", marker="s", linestyle="-", linewidth=1.6),
    "own-f16-wgmma": dict(color="#3f007d", marker="P", linestyle="-", linewidth=1.6),
    "cublaslt-fp16": dict(color="#252525", marker="D", linestyle="-", linewidth=2.2),
}


def gemm_ratio_text(p):
    """'at B = 8,192, × cuBLASLt fp32's TFLOP/s:' and one line per other implementation (the yardstick named)."""
    if not p["ratios"]:
        return f"no {A.gemm_short(p['yardstick'])} row to compare with"
    parts = [f"{A.gemm_short(i)}" + (" (not fp32 numerics)" if i in A.GEMM_NOT_FP32 else "") + f": {x:.3g}×"
             for i, x in p["ratios"].items() if i != p["yardstick"]]
    return f"at B = {p['ratio_batch']:,}, × {A.gemm_short(p['yardstick'])}'s TFLOP/s\n" + "\n".join(parts)


def fig13_gemm(d, path, device):
    _setup()
    from matplotlib.lines import Line2D  # noqa: PLC0415
    precs = [q for q in A.GEMM_PRECISIONS if any(p["precision"] == q for p in d["panels"])]
    ncols = max(sum(1 for p in d["panels"] if p["precision"] == q) for q in precs)
    legend_rows = max(len(A.GEMM_IMPLS[q]) + 1 for q in precs) + 1
    height = 4.6 * len(precs) + 1.4 + 0.2 * legend_rows
    fig, axes = plt.subplots(len(precs), ncols, figsize=(13, height), squeeze=False)
    failed = False
    columns = []
    for ri, q in enumerate(precs):
        ps = [p for p in d["panels"] if p["precision"] == q]
        roof = d["roofs"].get(q)
        ys = [pt[1] for p in ps for pts in p["series"].values() for pt in pts if pt[1] > 0]
        lo, hi = min(ys) / 1.6, max(ys + ([roof["tflops"]] if roof else [])) * 1.8
        handles = {}
        grid = sorted({pt[0] for p in ps for pts in p["series"].values() for pt in pts})  # the batches measured
        for ci in range(ncols):
            ax = axes[ri, ci]
            if ci >= len(ps):
                ax.set_visible(False)
                continue
            p = ps[ci]
            for impl, pts in p["series"].items():
                st = dict(GEMM_STYLE.get(impl, dict(color="#969696", marker="^", linestyle="-")))
                _plot_runs(ax, pts, grid, label=A.GEMM_TITLE.get(impl, impl), markersize=5.5, **st)
                bad = [pt for pt in pts if pt[2].get("passed") is False]
                if bad:
                    failed = True
                    ax.plot([pt[0] for pt in bad], [pt[1] for pt in bad], linestyle="none", marker="x",
                            color="#cb181d", markersize=11, markeredgewidth=2.2, label="failed its tolerance", zorder=5)
            if roof:
                ax.axhline(roof["tflops"], color="#555555", linestyle=":", linewidth=1.4, label=roof["label"])
            for h, l in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(l, h)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_ylim(lo, hi)
            ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
            _pow2_ticks(ax, [pt[0] for pts in p["series"].values() for pt in pts])
            ax.set_title(f"{q}, layer 0 {p['product'].replace('-', ' ')}: M × N × K = {p['shape']}", fontsize=10)
            # the lower right is empty: throughput grows with the batch
            ax.text(0.98, 0.03, gemm_ratio_text(p), transform=ax.transAxes, ha="right", va="bottom", fontsize=8.5,
                    bbox=dict(facecolor="white", edgecolor="#bbbbbb", alpha=0.9, pad=3.0))
            if ci == 0:
                ax.set_ylabel(f"{q} GEMM throughput (TFLOP/s, log scale)")
            if ri == len(precs) - 1:
                ax.set_xlabel("batch size B (log2 scale)")
        columns.append((q, handles))
    # one legend below the panels, a column per precision (the same lines in every panel of a row)
    hs, ls = [], []
    for q, handles in columns:
        col = [(Line2D([], [], linestyle="none"), f"{q} rows:")] + [(h, l) for l, h in handles.items()]
        col += [(Line2D([], [], linestyle="none"), "")] * (legend_rows - len(col))
        hs += [h for h, _ in col]
        ls += [l for _, l in col]
    bottom = (0.2 * legend_rows + 0.45) / height
    fig.legend(hs, ls, loc="lower center", ncol=len(columns), bbox_to_anchor=(0.5, 0.02), frameon=False, fontsize=8.5,
               handlelength=2.6, columnspacing=3.0)
    top = 1 - 0.8 / height
    fig.text(0.5, 1 - 0.42 / height, textwrap.fill(_finding(d, "TFLOP/s of layer 0's two products against the batch size"),
                                                    140), ha="center", va="top", fontsize=9.5)
    _finish(fig, path, "Figure 13 — the GEMM ladder against cuBLASLt (phase 5's GEMM benchmark, W1 784-128-64-10)",
            device, d["records"], "TFLOP/s = 2·M·N·K / the row's time; rows judged against a float64 reference "
            "(2u·√K + 8u)" + ("; red ×: failed its tolerance" if failed else ""),
            tight=(0, bottom, 1, top))
