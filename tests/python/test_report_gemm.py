"""Figure 13 of the report (the GEMM ladder against cuBLASLt) on the fixture records.

The H100 fixtures (tests/fixtures/records/make_fixtures.py, gemm_records) hold phase 5's GEMM
benchmark at batch 32, 512 and 8,192 (fp32) and 32 and 8,192 (fp16), plus an older fp32 record at
8,192 with other numbers. Made-up TFLOP/s: at batch 8,192 own-tf32x3 leads layer 0's forward (36
against cuBLASLt fp32's 30) and cuBLASLt fp32 its weight gradient (24 against own-tf32x3's 18).
"""
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from report_fixtures import FIXTURES, H100, copy_device  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "report"))

import analysis as A  # noqa: E402
import figures as F  # noqa: E402
import make_report as M  # noqa: E402
from records import load_profiles  # noqa: E402

GEMM_FILES = ["phase5_batched__gemm-b32.json", "phase5_batched__gemm-b512.json", "phase5_batched__gemm-b8192.json",
              "phase5_batched__gemm-b32-fp16.json", "phase5_batched__gemm-b8192-fp16.json"]


def h100_records():
    records, _, _ = load_profiles(FIXTURES)
    return A.benchmarks([r for r in records if r.slug == H100 and r.status == "ok" and r.phase != "run_all"])


def build(tmp_path, profiles):
    """Builds the report; returns (REPORT.md, APPENDIX.md, the Figure 13 calls of figures._finish)."""
    calls, real = [], F._finish

    def spy(fig, path, title, device, records, extra_footer="", **kw):
        if "__fig13_" in os.path.basename(path):
            calls.append({"path": path, "title": title, "files": sorted({r.file for r in records}),
                          "axes": [{"title": ax.get_title(), "visible": ax.get_visible(),
                                    "lines": [(ln.get_label(), ln.get_linestyle(), [float(x) for x in ln.get_xdata()],
                                               [float(y) for y in ln.get_ydata()]) for ln in ax.get_lines()]}
                                   for ax in fig.axes],
                          "legend": [t.get_text() for lg in fig.legends for t in lg.get_texts()],
                          "texts": [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts],
                          "footer": extra_footer})
        return real(fig, path, title, device, records, extra_footer, **kw)

    out = tmp_path / "out"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(F, "_finish", spy)
        mp.setenv("NB_REPORT_JOBS", "1")  # the spy sees the figures drawn in this process only
        assert M.main(["--profiles", str(profiles), "--out", str(out)]) == 0
    return (out / "REPORT.md").read_text(encoding="utf-8"), (out / "APPENDIX.md").read_text(encoding="utf-8"), calls, out


def test_gemm_selection_picks_the_gemm_benchmark_records():
    recs = h100_records()
    dups = []
    d = A.select_gemm(recs, dups)
    # only the GEMM benchmark records, the newest of the two at fp32 batch 8,192; nothing else of phase 5
    assert sorted(r.file for r in d["records"] if r.phase == "phase5_batched") == sorted(GEMM_FILES)
    assert [r.file for r in d["records"] if r.phase != "phase5_batched"] == ["ceilings__default.json"]  # fp16 roof
    assert dups == ["Figure 13 GEMM benchmark fp32 batch=8192: 2 records; used `phase5_batched__gemm-b8192.json` "
                    "(newest), not `phase5_batched__gemm-b8192-old.json`"]
    by_file = {r.file: r for r in recs}
    assert A.gemm_key(by_file["phase5_batched__gemm-b32-fp16.json"]) == ("fp16", 32)
    assert A.gemm_key(by_file["phase5_batched__w1.json"]) is None
    # four panels: fp32 and fp16, layer 0's forward and weight gradient, one series per implementation
    assert [(p["precision"], p["product"], p["shape"]) for p in d["panels"]] == [
        ("fp32", "forward", "B × 128 × 784"), ("fp32", "weight-gradient", "128 × 784 × B"),
        ("fp16", "forward", "B × 128 × 784"), ("fp16", "weight-gradient", "128 × 784 × B")]
    fwd = d["panels"][0]
    assert list(fwd["series"]) == ["own-tile", "own-tf32x3", "cublaslt-fp32", "cublaslt-tf32"]
    assert [(b, t) for b, t, _, _ in fwd["series"]["own-tf32x3"]] == [(32, 0.4), (512, 5.5), (8192, 36.0)]
    assert fwd["series"]["cublaslt-fp32"][-1][3].file == "phase5_batched__gemm-b8192.json"  # not the older record's 15
    assert fwd["ratio_batch"] == 8192 and fwd["ratios"]["own-tf32x3"] == pytest.approx(1.2)
    assert list(d["panels"][2]["series"]) == ["own-tile-wmma", "cublaslt-fp16"]
    # roofs from the records: the nominal fp32 SIMT peak of the device properties, the measured fp16 peak
    assert d["roofs"]["fp32"]["tflops"] == pytest.approx(132 * 1980e3 * 1e3 * 128 * 2 / 1e12)
    assert d["roofs"]["fp16"]["tflops"] == 650.0
    assert "fp32: no record at batch 64, 128, 256, 1,024, 2,048, 4,096" in d["missing"]
    assert "fp16: no record at batch 64, 128, 256, 512, 1,024, 2,048, 4,096" in d["missing"]
    # every row of the records picked is counted (8 products x 3 judged implementations x 3 fp32 records,
    # 8 x 2 x 2 fp16); cuBLASLt TF32 is not judged
    c = d["check"]
    assert (c["records"], c["judged"], c["passed"], c["failed"]) == (5, 8 * 3 * 3 + 8 * 2 * 2, 104, [])
    assert d["gathered"] == 0  # no fixture's notes say its layer 0 read the gathered bytes
    assert A.gemm_finding(d) == ("at batch 8,192 own-tf32x3 leads layer 0's forward and cuBLASLt fp32 leads layer 0's "
                                 "weight gradient; the best own rung, own-tf32x3, is 1.20× faster on the forward and "
                                 "1.33× slower on the weight gradient than cuBLASLt fp32")
    # no GEMM benchmark record: nothing to draw, and the missing list says so
    none = A.select_gemm([r for r in recs if A.gemm_key(r) is None], [])
    assert none["panels"] == [] and none["missing"] == ["fp32: no `gemm-b<B>` records", "fp16: no `gemm-b<B>-fp16` records"]


def test_gemm_figure_is_drawn_with_its_paragraph_and_every_point(tmp_path):
    profiles, _ = copy_device(tmp_path, GEMM_FILES + ["phase5_batched__gemm-b8192-old.json", "ceilings__default.json"])
    report, app, calls, out = build(tmp_path, profiles)
    assert os.path.exists(out / "figures" / f"{H100}__fig13_gemm_ladder.png")
    assert len(calls) == 1
    c = calls[0]
    assert c["title"].startswith("Figure 13 — the GEMM ladder against cuBLASLt")
    assert c["files"] == sorted(GEMM_FILES + ["ceilings__default.json"])
    titles = [a["title"] for a in c["axes"]]
    assert titles == ["fp32, layer 0 forward: M × N × K = B × 128 × 784",
                      "fp32, layer 0 weight gradient: M × N × K = 128 × 784 × B",
                      "fp16, layer 0 forward: M × N × K = B × 128 × 784",
                      "fp16, layer 0 weight gradient: M × N × K = 128 × 784 × B"]
    lines = {ln[0]: ln for ln in c["axes"][0]["lines"]}
    tf32 = lines["cuBLASLt TF32 (TF32, not fp32 numerics)"]
    assert tf32[1] == "--" and tf32[2] == [32.0, 512.0, 8192.0]   # dashed: not fp32 numerics
    assert lines["cuBLASLt fp32 (the yardstick)"][3] == [0.25, 5.25, 30.0]
    assert any(ln[0].startswith("nominal fp32 SIMT peak 67 TFLOP/s") for ln in c["axes"][0]["lines"])
    assert any(ln[0].startswith("measured fp16 tensor-core peak 650 TFLOP/s") for ln in c["axes"][2]["lines"])
    assert "cuBLASLt TF32 (TF32, not fp32 numerics)" in c["legend"]
    assert ("at B = 8,192, × cuBLASLt fp32's TFLOP/s\nown-tile: 0.5×\nown-tf32x3: 1.2×\n"
            "cuBLASLt TF32 (not fp32 numerics): 2×") in c["texts"]
    # REPORT.md: the finding as the heading, the image, the paragraph on the rungs and the check
    head = ("#### Figure 13 — At batch 8,192 own-tf32x3 leads layer 0's forward and cuBLASLt fp32 leads layer 0's "
            "weight gradient; the best own rung, own-tf32x3, is 1.20× faster on the forward and 1.33× slower on the "
            "weight gradient than cuBLASLt fp32\n")
    assert head in report
    sec = report[report.index(head):]
    sec = sec[:sec.index("every point in [APPENDIX.md]")]
    assert f"(figures/{H100}__fig13_gemm_ladder.png)" in sec
    for s in ("own-tile is the 32 × 64 SIMT tile", "own-tf32x3 is step 5, which splits each fp32 operand into two TF32 "
              "parts and adds three tensor-core products", "cuBLASLt fp32 (`CUBLAS_COMPUTE_32F`) is the yardstick",
              "not the same numerics as fp32", "within 2u·√K + 8u", "104 of the 104 judged rows of the 5 record(s)",
              "cuBLASLt TF32's error is recorded, never judged",
              "Layer 0's X: a dense random matrix, not the gathered bytes the step reads."):
        assert s in sec, s
    # APPENDIX.md: every point, the slot's older record named, the batches missing
    assert ("| fp32 | layer 0 forward | 8,192 | own-tf32x3 | 8,192 × 128 × 784 | 45.67 µs | 36.00 | 1.20× | 2.5e-07 | "
            "3.81e-06 | passed | 1 | [`phase5_batched__gemm-b8192.json`]") in app
    assert "| fp32 | layer 0 forward | 8,192 | cuBLASLt TF32 |" in app and "| not judged |" in app
    assert ("- Figure 13 GEMM benchmark fp32 batch=8192: 2 records; used `phase5_batched__gemm-b8192.json` (newest), "
            "not `phase5_batched__gemm-b8192-old.json`") in app
    assert ("- Figure 13 (The GEMM ladder against cuBLASLt): drawn without fp32: no record at batch 64, 128, 256, 1,024, "
            "2,048, 4,096;") in app


def test_gemm_paragraph_says_which_records_read_the_gathered_bytes(tmp_path):
    """A record whose notes say its layer 0 read X through the step's GatherView counts as gathered;
    the paragraph says in how many of the records drawn."""
    profiles, _ = copy_device(tmp_path, GEMM_FILES + ["ceilings__default.json"])
    path = profiles / H100 / "phase5_batched__gemm-b8192.json"
    rec = json.loads(path.read_text(encoding="utf-8"))
    rec.setdefault("notes", []).append("the first layer's X: bytes of a random batch from a pool of random images, read "
                                       "by the own rungs through the step's GatherView; the reference and cuBLASLt "
                                       "read them materialized")
    path.write_text(json.dumps(rec), encoding="utf-8")
    # and step 6's rows (fp16 on mma.sync): a series of their own, named in the paragraph and the legend
    path16 = profiles / H100 / "phase5_batched__gemm-b8192-fp16.json"
    rec16 = json.loads(path16.read_text(encoding="utf-8"))
    rows = rec16["metrics"]["gemm_bench"]
    rows += [dict(row, impl="own-f16-mma", tflops=row["tflops"] * 2) for row in rows if row["impl"] == "own-tile-wmma"]
    # and step 9's (fp16 on wgmma), on the first layer's products only: a series of its own too
    rows += [dict(row, impl="own-f16-wgmma", tflops=row["tflops"] * 3) for row in rows
             if row["impl"] == "own-tile-wmma" and row["layer"] == 0]
    path16.write_text(json.dumps(rec16), encoding="utf-8")
    report, _, calls, _ = build(tmp_path, profiles)
    assert ("Layer 0's X: gathered from bytes as the step reads them in 1 of the 5 records, a dense random matrix in "
            "the others.") in report
    assert "own-f16-mma is step 6: fp16 products on `mma.sync` in step 5's 64 × 64 tile." in report
    assert "own-f16-mma (step 6: fp16 mma.sync, step 5's tile)" in calls[0]["legend"]
    assert "own-f16-wgmma is step 9: the same tile with each warpgroup's 64 × 32 half on Hopper's `wgmma`" in report
    assert "own-f16-wgmma (step 9: fp16 wgmma, step 5's tile)" in calls[0]["legend"]


def test_gemm_row_over_its_tolerance_is_marked_and_named(tmp_path):
    profiles, dst = copy_device(tmp_path, GEMM_FILES)
    path = dst / "phase5_batched__gemm-b512.json"
    rec = json.loads(path.read_text())
    row = next(r for r in rec["metrics"]["gemm_bench"] if r["layer"] == 0 and r["product"] == "forward"
               and r["impl"] == "own-tile")
    row["passed"], row["rel_err"] = False, 1.0e-5
    path.write_text(json.dumps(rec))
    report, app, calls, _ = build(tmp_path, profiles)
    crosses = [ln for ln in calls[0]["axes"][0]["lines"] if ln[0] == "failed its tolerance"]
    assert len(crosses) == 1 and crosses[0][2] == [512.0] and crosses[0][1] == "None"
    assert "red ×: failed its tolerance" in calls[0]["footer"]
    assert "103 of the 104 judged rows" in report
    assert "Over their tolerance: fp32 batch 512 layer 0 forward own-tile: 1e-05 against 3.81e-06" in report
    assert "| fp32 | layer 0 forward | 512 | own-tile | 512 × 128 × 784 |" in app and "| **FAILED** |" in app


def test_without_gemm_records_figure_13_is_listed_as_not_drawn(tmp_path):
    profiles, _ = copy_device(tmp_path, ["phase1_naive__headline.json", "phase5_batched__w1.json"])
    report, app, calls, out = build(tmp_path, profiles)
    assert calls == [] and not os.path.exists(out / "figures" / f"{H100}__fig13_gemm_ladder.png")
    assert "Figure 13" not in report
    assert "### Figure 13 — The GEMM ladder against cuBLASLt\n\n_Not drawn: no phase5_batched record tagged " \
           "`gemm-b<B>` with rows in `metrics.gemm_bench`._" in app
    assert ("- Figure 13 (The GEMM ladder against cuBLASLt): **not drawn** — no phase5_batched record tagged `gemm-b<B>` "
            "with rows in `metrics.gemm_bench`. Expected: fp32: no `gemm-b<B>` records; fp16: no `gemm-b<B>-fp16` "
            "records.") in app


def test_gemm_speed_rows_read_both_record_forms():
    # the GEMM benchmark's rows: the largest layer's products, the fastest own rung against cuBLASLt
    recs = {r.file: r for r in h100_records()}
    r = recs["phase5_batched__gemm-b8192.json"]
    rows = dict(A.gemm_speed_rows(r))
    big = max((row for row in r.data["metrics"]["gemm_bench"]), key=lambda w: w["M"] * w["N"] * w["K"])["layer"]
    for prod, x in rows.items():
        here = [w for w in r.data["metrics"]["gemm_bench"] if w["layer"] == big and w["product"] == prod]
        own = min(w["ms"] for w in here if w["impl"].startswith("own-"))
        lt = [w["ms"] for w in here if w["impl"] == "cublaslt-fp32"][0]
        assert x == pytest.approx(lt / own)
    assert "forward" in rows and "weight-gradient" in rows
    # the older form (the largest layer's products, one row each with its speed ratio) still reads
    import types

    old = types.SimpleNamespace(data={"metrics": {"gemm_compare": [
        {"product": "forward", "own_over_cublaslt_speed": 0.8}, {"product": "wgrad", "own_over_cublaslt_speed": 1.25}]}})
    assert A.gemm_speed_rows(old) == [("forward", 0.8), ("wgrad", 1.25)]
    assert A.gemm_speed_rows(types.SimpleNamespace(data={"metrics": {}})) == []


def test_gemm_fma_ratios_take_the_faster_cuda_core_rung_on_big_passed_products_only():
    def row(layer, product, m, n, k, impl, ms, passed=True):
        return {"layer": layer, "product": product, "M": m, "N": n, "K": k, "impl": impl, "ms": ms, "passed": passed}
    rows_8192 = [row(0, "forward", 8192, 128, 784, "own-tile", 0.12), row(0, "forward", 8192, 128, 784, "own-fma64", 0.05),
                 row(0, "forward", 8192, 128, 784, "cublaslt-fp32", 0.055),
                 # a failed FMA row does not count: own-tile's 0.02 is the one taken
                 row(0, "weight-gradient", 128, 784, 8192, "own-fma64", 0.01, passed=False),
                 row(0, "weight-gradient", 128, 784, 8192, "own-tile", 0.08),
                 row(0, "weight-gradient", 128, 784, 8192, "cublaslt-fp32", 0.072),
                 # 10 MFLOP: not a big product
                 row(2, "forward", 8192, 10, 64, "own-tile", 0.01), row(2, "forward", 8192, 10, 64, "cublaslt-fp32", 0.02)]
    rows_512 = [row(0, "forward", 512, 128, 784, "own-tile", 0.02), row(0, "forward", 512, 128, 784, "cublaslt-fp32", 0.02)]
    got = A.gemm_fma_ratios([(8192, rows_8192), (512, rows_512)])
    assert [(b, l, p, i) for b, l, p, i, _ in got] == [(8192, 0, "forward", "own-fma64"),
                                                       (8192, 0, "weight-gradient", "own-tile")]
    assert got[0][4] == pytest.approx(1.1) and got[1][4] == pytest.approx(0.9)
    assert A.gemm_fma_ratios([(512, rows_512)]) == []
