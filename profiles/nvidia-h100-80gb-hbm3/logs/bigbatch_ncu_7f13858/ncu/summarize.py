#!/usr/bin/env python3
"""Summarize the four Nsight Compute profiles here (run from this folder): per kernel its duration,
issue rate, occupancy, the top stall reasons (warp cycles per issued instruction), the
instructions a warp issues, and the share of them and of the stall samples in the k-tile loop
(the instructions executed once per warp and k-tile: as many times as the loop's first MMA)."""
import collections, csv, gzip, re

def raw(name):
    rows = list(csv.reader(gzip.open(name + "-raw.csv.gz", "rt")))
    h = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
    return dict(zip(rows[h], rows[h + 2]))

def num(s):
    return float(s.replace(",", ""))

for name in ["f16-fwd", "f16-wgrad", "x3-fwd", "i8-fwd"]:
    d = raw(name)
    rows = list(csv.reader(gzip.open(name + "-sass.csv.gz", "rt")))
    h = {k: i for i, k in enumerate(rows[1])}
    ins = [(r[h["Source"]].strip(), int(r[h["Instructions Executed"]] or 0),
            int(r[h["Warp Stall Sampling (All Samples)"]] or 0)) for r in rows[2:] if len(r) >= len(h)]
    warps = num(d["launch__grid_size"]) * num(d["launch__block_size"]) / 32
    mma = [i for i, x in enumerate(ins) if "MMA" in x[0]]
    per = ins[mma[0]][1]  # executions of the loop's first MMA: warps x k-tiles
    loop = [x for x in ins if x[1] == per or (x[1] > 0 and abs(x[1] - per) <= per * 0.12)]
    tot_i = sum(x[1] for x in ins); tot_s = sum(x[2] for x in ins)
    stalls = {k[len("smsp__average_warps_issue_stalled_"):-len("_per_issue_active.ratio")]: num(v)
              for k, v in d.items() if k.startswith("smsp__average_warps_issue_stalled_")
              and k.endswith("_per_issue_active.ratio") and v not in ("", "n/a")}
    top = sorted(stalls.items(), key=lambda kv: -kv[1])[:5]
    ops = collections.Counter()
    for s, e, _ in loop:
        ops[re.sub(r"^@!?U?P\w+\s+", "", s).split(" ")[0]] += e / per
    print(f"== {name}: {num(d['gpu__time_duration.sum']):.2f} us, grid {int(num(d['launch__grid_size']))} x "
          f"{int(num(d['launch__block_size']))}, {int(num(d['launch__registers_per_thread']))} registers")
    print(f"   issued a scheduler cycle {num(d['smsp__issue_active.avg.per_cycle_active']):.2f}, achieved occupancy "
          f"{num(d['sm__warps_active.avg.pct_of_peak_sustained_active']):.1f}%, warp cycles an issued instruction "
          f"{sum(stalls.values()):.2f}: " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    print(f"   instructions a warp {tot_i / warps:.0f}; k-tiles a warp {per / warps:.1f}; the loop "
          f"{sum(e for _, e, _ in loop) / per:.0f} a k-tile ({100 * sum(e for _, e, _ in loop) / tot_i:.0f}% of "
          f"instructions, {100 * sum(p for *_, p in loop) / tot_s:.0f}% of stall samples)")
    print("   the loop's instructions a k-tile: " + ", ".join(f"{o} {c:.0f}" for o, c in ops.most_common(10)))
