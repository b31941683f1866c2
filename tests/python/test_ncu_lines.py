"""scripts/ncu_lines.py: the per-instruction page of an ncu report attributed to CUDA source lines."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ncu_lines.py")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
from test_ncu_regions import ROWS, page  # noqa: E402

# The kernel's code as `nvdisasm -gi -c` prints it: an intrinsic (toolkit header, charged to its
# caller), a helper inlined into the body (innermost line: the helper's; statement: the body's),
# and another function first, which must not be taken for the kernel.
LISTING = """\
\t.section\t.text._Z5otherv,"ax",@progbits
\t//## File "/src/k.cu", line 1
        /*0000*/                   LDS R4, [R2] ;
        /*0010*/                   EXIT ;
\t.section\t.text._Z1kv,"ax",@progbits
_Z1kv:
\t//## File "/usr/local/cuda/include/sm_30_intrinsics.hpp", line 449 inlined at "/src/h.cuh", line 7
\t//## File "/src/h.cuh", line 7 inlined at "/src/k.cu", line 20
        /*0000*/                   LDS R4, [R2] ;
\t//## File "/src/h.cuh", line 8 inlined at "/src/k.cu", line 20
        /*0010*/                   FFMA R5, R4, R4, R5 ;
\t//## File "/src/k.cu", line 21
        /*0020*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
\t//## File "/src/h.cuh", line 30 inlined at "/src/k.cu", line 22
        /*0030*/                   PRMT R6, R7, 0x7540, R8 ;
        /*0040*/                   FADD R6, R6, -8388608 ;
\t//## File "/src/k.cu", line 23
        /*0050*/                   EXIT ;
        /*0060*/               @!P0 BRA `(.L_x_1) ;
"""


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *map(str, args)], capture_output=True, text=True, timeout=60)


def test_lines_statements_and_per(tmp_path):
    f, lst, out = tmp_path / "p_sass.csv", tmp_path / "k.sass", tmp_path / "p_lines.json"
    f.write_text(page(ROWS))
    lst.write_text(LISTING)
    p = run(f, lst, "--json", out, "--per", 100)
    assert p.returncode == 0, p.stderr
    s = json.loads(out.read_text())
    assert s["kind"] == "ncu_lines" and s["function"] == "_Z1kv" and s["instructions"] == 7
    total = 3 * 100 + 2 * 400 + 100
    assert s["executed_warp_instructions"] == total and s["per"] == 100
    lines = {(e["file"], e["line"]): e for e in s["lines"]}
    # the intrinsic's LDS counts at its caller, h.cuh:7; the FFMA at h.cuh:8; the PRMT + FADD at h.cuh:30
    assert lines[("h.cuh", 7)]["executed"] == 100 and lines[("h.cuh", 8)]["executed"] == 100
    assert lines[("h.cuh", 30)]["executed"] == 800 and lines[("h.cuh", 30)]["sass_instructions"] == 2
    assert abs(lines[("h.cuh", 30)]["issue_share"] - 800 / total) < 1e-12
    assert abs(lines[("h.cuh", 30)]["executed_per"] - 8.0) < 1e-12
    # the barrier's samples (20 of 40) and its stall reason stay on k.cu:21
    assert abs(lines[("k.cu", 21)]["sample_share"] - 20 / 40) < 1e-12
    assert lines[("k.cu", 21)]["top_stalls"][0][0] == "barrier"
    st = {(e["file"], e["line"]): e["executed"] for e in s["statements"]}
    assert st[("k.cu", 20)] == 200 and st[("k.cu", 22)] == 800 and st[("k.cu", 23)] == 100
    files = {e["file"]: e["executed"] for e in s["files"]}
    assert files == {"h.cuh": 1000, "k.cu": 200}
    assert "h.cuh:30" in p.stdout and "by statement" in p.stdout


def test_refuses_another_build(tmp_path):
    f, lst = tmp_path / "p_sass.csv", tmp_path / "k.sass"
    f.write_text(page(ROWS))
    lst.write_text(LISTING.replace("FFMA R5, R4, R4, R5", "FMUL R5, R4, R4"))  # one opcode differs
    p = run(f, lst)
    assert p.returncode == 2 and "another build" in p.stderr and p.stdout == ""


def test_bad_inputs(tmp_path):
    f, lst = tmp_path / "p_sass.csv", tmp_path / "k.sass"
    f.write_text(page(ROWS))
    lst.write_text("no functions here\n")
    p = run(f, lst)
    assert p.returncode == 2 and "no functions" in p.stderr
    p = run(f, tmp_path / "missing.sass")
    assert p.returncode == 2 and "cannot read" in p.stderr
    lst.write_text(LISTING)
    p = run(f, lst, "--per", 0)
    assert p.returncode == 2 and "--per" in p.stderr
    elf = tmp_path / "k.cubin"
    elf.write_bytes(b"\x7fELF" + b"\0" * 60)
    p = run(f, elf, "--nvdisasm", tmp_path / "no-such-nvdisasm")
    assert p.returncode == 2 and "cannot run" in p.stderr
