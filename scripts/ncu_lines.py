#!/usr/bin/env python3
"""scripts/ncu_lines.py — where a kernel's issue slots and stalls go, by line of CUDA source.

Reads the per-instruction page of an Nsight Compute report (what `scripts/profile.sh ncu` writes with
STALLS=1: `ncu --import R.ncu-rep --page source --csv --print-source sass`, gzipped or not) and the
machine code of the same build as `nvdisasm -gi` prints it (the cubin of a binary built with
-lineinfo, as the Makefile builds): every SASS instruction carries the file and line it came from,
and the page's instructions are the kernel's, in address order. The function of the listing whose
opcode sequence equals the page's is the profiled kernel; if none does, the listing is of another
build and the script refuses (exit 2) rather than attribute counts to the wrong lines.

Two views, each sorted by issue share + sample share: by statement of the kernel's own body (the
call each instruction was inlined into: a persistent kernel's phases), and by source line (the
innermost one of inlined code: the line of the helper, not of its caller; but a toolkit
intrinsic's instructions count at the line that called it). For each it gives the executed warp instructions and the warp-state samples, with their shares and
the line's three most frequent stall reasons; per file the same totals. With --per N (e.g. warps x
steps of a persistent kernel) the executions are also given per N: instructions a warp a step.

  python3 scripts/ncu_lines.py SASS.csv[.gz] LISTING [--json OUT.json] [--top N] [--per N]

LISTING: `nvdisasm -gi -c CUBIN` output (or a cubin: then --nvdisasm names the disassembler, default
`nvdisasm` on PATH). Exit status: 0 done; 2 a file is missing or is not what it should be, or the
listing holds no function with the page's instructions (one line on stderr).
"""
import argparse
import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ncu_regions import EXEC, SAMPLES, Bad, num, opcode, read_page, write_json  # noqa: E402

SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
LOCATION = re.compile(r'//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?')
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*(?:/\*.*)?$")


def toolkit(path):
    """A CUDA toolkit header (sm_30_intrinsics.hpp, cuda_pipeline_helpers.h, ...), not the project's code."""
    return "/include/" in path


def read_listing(path, nvdisasm="nvdisasm"):
    """{function: [(opcode, file, line, outer file, outer line)]} from an `nvdisasm -gi` (or -g) listing,
    or a cubin, disassembled. An instruction's line is the innermost of its inlined code, except that
    a toolkit header's line (an intrinsic) is charged to the line that called it (-gi); its outer line
    is the statement of the kernel's own body it was inlined into (with -g: the same as the line)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise Bad(f"cannot read {path}: {e.strerror or e}")
    if head == b"\x7fELF":
        try:
            p = subprocess.run([nvdisasm, "-gi", "-c", path], capture_output=True, text=True, timeout=600)
        except OSError as e:
            raise Bad(f"cannot run {nvdisasm}: {e.strerror or e}")
        if p.returncode != 0:
            raise Bad(f"{nvdisasm} failed on {path}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
        text = p.stdout
    else:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    # With -gi an instruction's locations come innermost first ("A, line N inlined at B, line M",
    # then "B, line M inlined at C, line K", ...), the last one the kernel's own body.
    funcs, cur, inner, outer, fresh = {}, None, ("?", 0), ("?", 0), True
    for line in text.splitlines():
        m = SECTION.match(line)
        if m:
            cur, inner, outer, fresh = m.group(1), ("?", 0), ("?", 0), True
            funcs[cur] = []
            continue
        if cur is None:
            continue
        m = LOCATION.search(line)
        if m:
            here = (m.group(1), int(m.group(2)))
            if fresh:
                inner = here if not (m.group(3) and toolkit(here[0])) else (m.group(3), int(m.group(4)))
                fresh = False
            outer = here if not m.group(3) else (m.group(3), int(m.group(4)))
            continue
        m = INSTRUCTION.match(line)
        if m and m.group(2) and not m.group(2).startswith("."):
            funcs[cur].append((opcode(m.group(2)), inner[0], inner[1], outer[0], outer[1]))
            fresh = True
    funcs = {k: v for k, v in funcs.items() if v}
    if not funcs:
        raise Bad(f"{path}: no functions with instructions (want `nvdisasm -gi -c` output or a cubin)")
    return funcs


def match_function(funcs, page_ops):
    """The listing's function whose opcode sequence is the page's (its name and instructions)."""
    for name, ins in funcs.items():
        if len(ins) == len(page_ops) and all(a == b[0] for a, b in zip(page_ops, ins)):
            return name, ins
    sizes = sorted({len(v) for v in funcs.values()})
    raise Bad(f"no function of the listing has the page's {len(page_ops)} instructions in order (sizes there: "
              f"{', '.join(map(str, sizes[:8]))}{' ...' if len(sizes) > 8 else ''}): another build?")


def summarize(kernel, hdr, rows, funcs, top=40, per=None):
    ie, isamp, isrc = hdr.index(EXEC), hdr.index(SAMPLES), hdr.index("Source")
    stall_cols = [(h[len("stall_"):], hdr.index(h)) for h in hdr if h.startswith("stall_") and "Not Issued" not in h]
    name, ins = match_function(funcs, [opcode(r[isrc]) for r in rows])
    new = lambda: {"executed": 0, "samples": 0, "instructions": 0, "stalls": collections.Counter()}  # noqa: E731
    by_line, by_stmt = collections.defaultdict(new), collections.defaultdict(new)
    for r, (_, f, ln, of, oln) in zip(rows, ins):
        for d in (by_line[(os.path.basename(f), ln)], by_stmt[(os.path.basename(of), oln)]):
            d["executed"] += num(r[ie])
            d["samples"] += num(r[isamp])
            d["instructions"] += 1
            d["stalls"].update({s: num(r[c]) for s, c in stall_cols})
    total_ex = sum(d["executed"] for d in by_line.values())
    total_samp = sum(d["samples"] for d in by_line.values())
    if total_ex == 0:
        raise Bad("no instruction executed (was the SourceCounters section collected?)")

    def entry(key, d):
        st = d["stalls"]
        tot = sum(st.values())
        e = {"file": key[0], "executed": d["executed"], "issue_share": d["executed"] / total_ex,
             "sample_share": d["samples"] / total_samp if total_samp else 0.0, "sass_instructions": d["instructions"],
             "top_stalls": [[n, v / tot] for n, v in st.most_common(3) if v > 0] if tot else []}
        if key[1] is not None:
            e["line"] = key[1]
        if per:
            e["executed_per"] = d["executed"] / per
        return e

    lines = sorted((entry(k, d) for k, d in by_line.items() if d["executed"] or d["samples"]),
                   key=lambda e: -(e["issue_share"] + e["sample_share"]))
    statements = sorted((entry(k, d) for k, d in by_stmt.items() if d["executed"] or d["samples"]),
                        key=lambda e: -(e["issue_share"] + e["sample_share"]))
    files = collections.defaultdict(new)
    for (f, _), d in by_line.items():
        a = files[f]
        a["executed"] += d["executed"]
        a["samples"] += d["samples"]
        a["instructions"] += d["instructions"]
        a["stalls"].update(d["stalls"])
    out = {
        "kind": "ncu_lines",
        "kernel": kernel,
        "function": name,
        "instructions": len(rows),
        "executed_warp_instructions": total_ex,
        "stall_samples": total_samp,
        "files": sorted((entry((f, None), d) for f, d in files.items()), key=lambda e: -e["issue_share"]),
        "statements": statements[:top],
        "lines": lines[:top],
    }
    if per:
        out["per"] = per
    return out


def text(s):
    per = s.get("per")
    out = [f"{s['kernel']}: {s['instructions']} SASS instructions, {s['executed_warp_instructions']:,} warp "
           f"instructions executed, {s['stall_samples']:,} warp-state samples"
           + (f"; 'per': executions / {per:g}" if per else "")]
    head = f"{'file:line':<34} {'sass':>5} {'issue%':>6} {'samp%':>6} " + (f"{'per':>9} " if per else "") + " top stalls"
    for title, rows in (("by file (innermost source)", s["files"]),
                        ("by statement of the kernel's body (what each was inlined into)", s["statements"]),
                        ("by line (innermost source of inlined code; intrinsics at their caller)", s["lines"])):
        out.append(title + ":")
        out.append(head)
        for e in rows:
            where = f"{e['file']}:{e['line']}" if "line" in e else e["file"]
            st = " ".join(f"{n}:{100 * v:.0f}%" for n, v in e["top_stalls"])
            out.append(f"{where[-34:]:<34} {e['sass_instructions']:>5} {100 * e['issue_share']:>6.1f} "
                       f"{100 * e['sample_share']:>6.1f} " + (f"{e['executed_per']:>9.1f} " if per else "") + f" {st}")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("listing", help="nvdisasm -gi -c output of the same build, or the cubin itself")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--top", type=int, default=40, help="source lines to keep (by issue share + sample share)")
    ap.add_argument("--per", type=float, help="also give executions divided by this (e.g. warps x steps)")
    ap.add_argument("--nvdisasm", default="nvdisasm", help="the disassembler, when LISTING is a cubin")
    a = ap.parse_args(argv)
    try:
        if a.top < 1:
            raise Bad("--top must be at least 1")
        if a.per is not None and not a.per > 0:
            raise Bad("--per must be positive")
        kernel, hdr, rows = read_page(a.csv)
        s = summarize(kernel, hdr, rows, read_listing(a.listing, a.nvdisasm), top=a.top, per=a.per)
    except Bad as e:
        print(f"ncu_lines.py: {e}", file=sys.stderr)
        return 2
    s["source"] = os.path.basename(a.csv)
    print(text(s))
    if a.json:
        write_json(a.json, s)
        print(f"ncu_lines.py: wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
