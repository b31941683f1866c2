"""scripts/ncu_regions.py: the per-instruction page of an ncu report grouped into code regions."""
import gzip
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "ncu_regions.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import ncu_regions as R  # noqa: E402

HDR = ['"Address"', '"Source"', '"Warp Stall Sampling (All Samples)"', '"Instructions Executed"',
       '"stall_barrier"', '"stall_wait"', '"stall_long_sb"', '"stall_wait (Not Issued)"']


def page(rows, kernel="k<1>(P)"):
    out = [f'"Kernel Name","{kernel}",', ",".join(HDR)]
    for i, (src, samp, ex, bar, wait, lsb) in enumerate(rows):
        out.append(",".join(f'"{v}"' for v in (hex(0x1000 + 16 * i), src, samp, ex, bar, wait, lsb, 999)))
    return "\n".join(out) + "\n"


# a region that runs 100 times (3 instructions), one 400 times (2), a never-run instruction, then
# another 100-times stretch: separate regions, because they are not adjacent
ROWS = [
    ("      LDS R4, [R2]", 10, 100, 0, 4, 6),
    ("      FFMA R5, R4, R4, R5", 2, 100, 0, 2, 0),
    ("      BAR.SYNC.DEFER_BLOCKING 0x0", 20, 100, 18, 2, 0),
    ("      PRMT R6, R7, 0x7540, R8", 4, 400, 0, 3, 1),
    ("      FADD R6, R6, -8388608", 4, 400, 0, 4, 0),
    ("      EXIT", 0, 0, 0, 0, 0),
    ("@!P0 BRA `(.L_x_1)", 0, 100, 0, 0, 0),
]


def run(path, *args):
    return subprocess.run([sys.executable, SCRIPT, str(path), *args], capture_output=True, text=True, timeout=60)


def test_regions_shares_and_stalls(tmp_path):
    f = tmp_path / "p_sass.csv"
    f.write_text(page(ROWS))
    out = tmp_path / "p_regions.json"
    p = run(f, "--json", out)
    assert p.returncode == 0, p.stderr
    s = json.loads(out.read_text())
    assert s["kernel"] == "k<1>(P)" and s["instructions"] == 7 and s["instructions_executed_at_least_once"] == 6
    total = 3 * 100 + 2 * 400 + 100
    assert s["executed_warp_instructions"] == total and s["max_executions_of_one_instruction"] == 400
    assert s["stall_samples"] == 40
    # stall shares over all samples of the stall columns (the "Not Issued" copies are not counted twice)
    assert s["stall_share"] == {"wait": 15 / 40, "barrier": 18 / 40, "long_sb": 7 / 40}
    by_first = {g["first"]: g for g in s["regions"]}
    assert sorted(by_first) == [0, 3, 6]
    a, b, c = by_first[0], by_first[3], by_first[6]
    assert (a["last"], a["instructions"], a["executions"]) == (2, 3, 100)
    assert abs(a["issue_share"] - 300 / total) < 1e-12 and abs(a["sample_share"] - 32 / 40) < 1e-12
    assert a["top_stalls"][0] == ["barrier", 18 / 32] and [n for n, _ in a["top_stalls"]] == ["barrier", "wait", "long_sb"]
    assert abs(b["issue_share"] - 800 / total) < 1e-12 and b["ops"] == [["PRMT", 1], ["FADD", 1]]
    assert c["ops"] == [["BRA", 1]] and c["top_stalls"] == [] and c["sample_share"] == 0.0
    # ordered by issue share + sample share: the 400-times region's 0.667 + 0.2 against 0.25 + 0.8
    assert [g["first"] for g in s["regions"]] == [0, 3, 6]
    assert "where the warps' samples went: barrier 45.0%, wait 37.5%, long_sb 17.5%" in p.stdout
    p = run(f, "--top", "1", "--json", out)
    assert p.returncode == 0 and len(json.loads(out.read_text())["regions"]) == 1
    gz = tmp_path / "p_sass.csv.gz"
    with gzip.open(gz, "wt") as g:
        g.write(page(ROWS))
    p = run(gz, "--json", out)
    assert p.returncode == 0 and json.loads(out.read_text())["executed_warp_instructions"] == total


def test_opcode_strips_predicates_and_modifiers():
    assert R.opcode("@!P0 BRA `(.L_x_1)") == "BRA"
    assert R.opcode("  @UP1 LDS.128 R4, [R2+0x10]") == "LDS"
    assert R.opcode("HMMA.16816.F32 R0, R4, R8, R0") == "HMMA"


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    p = run(tmp_path / "missing.csv")
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "cannot read" in p.stderr
    f = tmp_path / "details.csv"
    f.write_text('"ID","Kernel Name","Section Name"\n"0","k","GPU Speed Of Light Throughput"\n')
    p = run(f)
    assert p.returncode == 2 and "no 'Address' header line" in p.stderr
    f.write_text(page(ROWS).replace('"Instructions Executed"', '"Something Else"'))
    p = run(f)
    assert p.returncode == 2 and "no 'Instructions Executed' column" in p.stderr
    f.write_text(page(ROWS) + '"0x9999","NOP","1"\n')
    p = run(f)
    assert p.returncode == 2 and "a row with 3 fields" in p.stderr
    f.write_text(page([(s, 0, 0, 0, 0, 0) for s, *_ in ROWS]))
    p = run(f)
    assert p.returncode == 2 and "no instruction executed" in p.stderr
    f.write_text(page(ROWS))
    out = tmp_path / "never.json"
    p = run(f, "--top", "0", "--json", out)
    assert p.returncode == 2 and not out.exists()
