"""The report tests' fixture records (tests/fixtures/records/<device>/) and a copy of some of them
into a scratch profiles/ tree."""
import os
import shutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "records")
H100 = "nvidia-h100-80gb-hbm3"


def copy_device(tmp_path, names, device=H100):
    """Copies the named fixture records of `device` into tmp_path/profiles/<device>/; returns
    (profiles dir, device dir)."""
    dst = tmp_path / "profiles" / device
    dst.mkdir(parents=True)
    for n in names:
        shutil.copy(os.path.join(FIXTURES, device, n), dst / n)
    return tmp_path / "profiles", dst
