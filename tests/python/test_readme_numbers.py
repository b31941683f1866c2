"""README.md's answer and chapter numbers are the report's: every time (ms, µs) and ratio (×) quoted in
those sections (but an estimate marked "~") appears in report/REPORT.md or report/APPENDIX.md, which are generated from the committed
run records. A number typed by hand, or left behind when the records changed, fails here."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NUM = re.compile(r"(?<![\w.,~])(\d[\d,]*(?:\.\d+)?)\s?(ms|µs|×)")


def section(text, start, end):
    i = text.index(start)
    j = text.index(end, i)
    return text[i:j]


def quoted(text):
    return {(n, u) for n, u in NUM.findall(text)}


def test_readme_numbers_come_from_the_report():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    report = "".join(open(os.path.join(ROOT, "report", f), encoding="utf-8").read()
                     for f in ("REPORT.md", "APPENDIX.md"))
    have = quoted(report)
    text = section(readme, "## The answer so far", "## Layout")
    missing = sorted(f"{n} {u}" for n, u in quoted(text) if (n, u) not in have)
    assert not missing, "README numbers not in the generated report: " + ", ".join(missing)


def test_the_check_catches_a_number_typed_by_hand():
    have = quoted("phase 3 takes 0.4554 ms, 5.89× faster")
    assert ("0.4554", "ms") in have and ("5.89", "×") in have
    assert ("0.4555", "ms") not in have
