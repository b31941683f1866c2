#!/usr/bin/env python3
"""scripts/ncu_sass_summary.py — one kernel's Nsight Compute source page, summed up.

Reads the CSV that `ncu -i REPORT --page source --csv --print-source sass` prints (a report taken
with --section SourceCounters and --import-source yes) and prints: the warp-stall samples by reason,
the executed warp-level instructions by opcode (with their stall samples), and the N instructions
with the most stall samples (their top three reasons). Used by the GEMM chapters' profiling calls
(profiles/<device>/logs/*/ncu-*-sass-summary.txt).

    scripts/ncu_sass_summary.py SASS.csv [N]      (N: top instructions to list, default 25)
Exit status: 0; 2 when the file is not such a page.
"""
import collections
import csv
import sys


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip().splitlines()[4].strip())
        return 2
    rows = list(csv.reader(open(sys.argv[1], newline="")))
    top_n = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    hdr_i = next((i for i, r in enumerate(rows[:5]) if "Address" in r and "Source" in r), None)
    if hdr_i is None:
        print(f"ncu_sass_summary: {sys.argv[1]} is not an ncu source page (no Address/Source header)")
        return 2
    hdr = rows[hdr_i]
    ix = {h: i for i, h in enumerate(hdr)}
    stalls = [h for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    samples_col, exec_col = "Warp Stall Sampling (All Samples)", "Instructions Executed"
    insts = []
    for r in rows[hdr_i + 1:]:
        if len(r) < len(hdr):
            continue
        st = {s: int(r[ix[s]] or 0) for s in stalls}
        insts.append((int(r[ix[samples_col]] or 0), int(r[ix[exec_col]] or 0), r[ix["Address"]], r[ix["Source"]].strip(), st))
    total = sum(i[0] for i in insts)
    by_reason = collections.Counter()
    for *_, st in insts:
        by_reason.update(st)
    print(f"stall samples: {total}")
    for s, v in by_reason.most_common(12):
        print(f"  {s:24s} {v:8d} {100 * v / max(1, total):5.1f}%")
    ops, op_samples = collections.Counter(), collections.Counter()
    for smp, ex, _, src, _ in insts:
        words = src.split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "?")
        op = op.split(".")[0]
        ops[op] += ex
        op_samples[op] += smp
    executed = sum(ops.values())
    print(f"executed warp-level instructions: {executed}")
    for op, v in ops.most_common(25):
        print(f"  {op:10s} {v:10d} {100 * v / max(1, executed):5.1f}%  stall samples {op_samples[op]}")
    print(f"the {top_n} instructions with the most stall samples (samples, executed, address, source, top reasons)")
    for smp, ex, addr, src, st in sorted(insts, key=lambda i: -i[0])[:top_n]:
        top = sorted(st.items(), key=lambda kv: -kv[1])[:3]
        print(f"{smp:6d} {ex:9d} {addr[-5:]} {src[:60]:60s} {' '.join(f'{k[6:]}={v}' for k, v in top)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
