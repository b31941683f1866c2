#!/usr/bin/env python3
"""scripts/ncu_regions.py — where a kernel's issue slots and stalls go, by stretch of machine code.

Reads the per-instruction page of an Nsight Compute report (what `scripts/profile.sh ncu` writes with
STALLS=1: `ncu --import R.ncu-rep --page source --csv --print-source sass`, gzipped or not, from a
report with the SourceCounters section) and groups the SASS into regions: maximal runs of consecutive instructions
that executed the same number of times (a basic block, or straight-line code across blocks that
always run together). For each region it gives

  * its share of all executed warp instructions (where the issue slots went),
  * its share of the warp-state samples (where warps spent their time, issued or not), and the
    region's three most frequent stall reasons,
  * its opcode mix (e.g. PRMT/FADD/FFMA in equal parts: a byte-to-float conversion before each FMA).

A persistent kernel's steps are one launch, so the per-phase timers (--breakdown) say how long a
phase took and this says what the SM was doing meanwhile. A sample is counted at the instruction the
warp waits to issue: the wait at a block barrier lands on the instruction after the BAR.SYNC, so it
belongs to the phase that ends there.

  python3 scripts/ncu_regions.py SASS.csv [--json OUT.json] [--top N]

Exit status: 0 done; 2 the file is missing or is not such a page (one line on stderr).
"""
import argparse
import collections
import csv
import gzip
import json
import os
import re
import sys

EXEC = "Instructions Executed"
SAMPLES = "Warp Stall Sampling (All Samples)"


class Bad(Exception):
    pass


def opcode(src):
    """'@!P0 BRA `(.L_x_1)' -> 'BRA'; 'LDS.128 R4, [R2]' -> 'LDS'."""
    s = re.sub(r"^\s*@!?U?P[T0-9]+\s+", "", src.strip())
    return re.split(r"[\s.]", s, maxsplit=1)[0] if s else "?"


def read_page(path):
    """The first kernel of the page: (kernel name, header, rows)."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt", newline="") as f:
                lines = list(csv.reader(f))
        else:
            with open(path, newline="") as f:
                lines = list(csv.reader(f))
    except OSError as e:
        raise Bad(f"cannot read {path}: {e.strerror or e}")
    kernel, i = "", 0
    while i < len(lines) and (not lines[i] or lines[i][0] != "Address"):
        if lines[i] and lines[i][0] == "Kernel Name" and len(lines[i]) > 1:
            kernel = lines[i][1]
        i += 1
    if i == len(lines):
        raise Bad(f"{path}: no 'Address' header line (export with --page source --csv --print-source sass)")
    hdr = lines[i]
    for col in ("Source", EXEC, SAMPLES):
        if col not in hdr:
            raise Bad(f"{path}: no '{col}' column (profile with the SourceCounters section)")
    rows = []
    for r in lines[i + 1:]:
        if not r or r[0] == "Kernel Name" or r[0] == "Address":
            break  # the next kernel's page
        if len(r) != len(hdr):
            raise Bad(f"{path}: a row with {len(r)} fields under a header of {len(hdr)}")
        rows.append(r)
    if not rows:
        raise Bad(f"{path}: no instructions under the header")
    return kernel, hdr, rows


def num(v):
    v = v.replace(",", "").strip()
    return int(float(v)) if v not in ("", "-") else 0


def summarize(kernel, hdr, rows, top=25):
    ie, isamp, isrc = hdr.index(EXEC), hdr.index(SAMPLES), hdr.index("Source")
    stall_cols = [(h[len("stall_"):], hdr.index(h)) for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    ex = [num(r[ie]) for r in rows]
    samp = [num(r[isamp]) for r in rows]
    stalls = [collections.Counter({name: num(r[c]) for name, c in stall_cols}) for r in rows]
    total_ex, total_samp = sum(ex), sum(samp)
    if total_ex == 0:
        raise Bad("no instruction executed (was the SourceCounters section collected?)")
    stall_tot = sum(stalls, collections.Counter())
    regions, a = [], 0
    for b in range(1, len(rows) + 1):
        if b < len(rows) and ex[b] == ex[a]:
            continue
        if ex[a] > 0:
            st = sum(stalls[a:b], collections.Counter())
            rs = sum(samp[a:b])
            ops = collections.Counter(opcode(rows[k][isrc]) for k in range(a, b))
            regions.append({
                "first": a, "last": b - 1, "instructions": b - a, "executions": ex[a],
                "issue_share": ex[a] * (b - a) / total_ex,
                "sample_share": rs / total_samp if total_samp else 0.0,
                "top_stalls": [[n, v / rs] for n, v in st.most_common(3) if v > 0] if rs else [],
                "ops": [[o, n] for o, n in ops.most_common(6)],
            })
        a = b
    regions.sort(key=lambda g: -(g["issue_share"] + g["sample_share"]))
    executed = sum(1 for e in ex if e > 0)
    return {
        "kind": "ncu_regions",
        "kernel": kernel,
        "instructions": len(rows),
        "instructions_executed_at_least_once": executed,
        "executed_warp_instructions": total_ex,
        "max_executions_of_one_instruction": max(ex),
        "stall_samples": total_samp,
        "stall_share": {n: v / sum(stall_tot.values()) for n, v in stall_tot.most_common() if v > 0},
        "regions": regions[:top],
    }


def text(s):
    out = [f"{s['kernel']}: {s['instructions']} SASS instructions ({s['instructions_executed_at_least_once']} executed), "
           f"{s['executed_warp_instructions']:,} warp instructions executed, {s['stall_samples']:,} warp-state samples"]
    out.append("where the warps' samples went: " +
               ", ".join(f"{n} {100 * v:.1f}%" for n, v in list(s["stall_share"].items())[:8]))
    out.append(f"{'SASS #':>12} {'instr':>5} {'runs':>12} {'issue%':>6} {'samp%':>6}  top stalls | opcode mix")
    for g in s["regions"]:
        st = " ".join(f"{n}:{100 * v:.0f}%" for n, v in g["top_stalls"])
        ops = " ".join(f"{o}:{n}" for o, n in g["ops"])
        out.append(f"{g['first']:>5}-{g['last']:<6} {g['instructions']:>5} {g['executions']:>12,} "
                   f"{100 * g['issue_share']:>6.1f} {100 * g['sample_share']:>6.1f}  {st} | {ops}")
    return "\n".join(out)


def write_json(path, obj):
    """obj as JSON at path, whole or not at all (a temporary file, then a rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
    os.replace(tmp, path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--top", type=int, default=25, help="regions to keep (by issue share + sample share)")
    a = ap.parse_args(argv)
    try:
        if a.top < 1:
            raise Bad("--top must be at least 1")
        s = summarize(*read_page(a.csv), top=a.top)
    except Bad as e:
        print(f"ncu_regions.py: {e}", file=sys.stderr)
        return 2
    s["source"] = os.path.basename(a.csv)
    print(text(s))
    if a.json:
        write_json(a.json, s)
        print(f"ncu_regions.py: wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
