"""Tests for scripts/fetch_data.sh (`make data`): md5 verification, deletion of bad files,
idempotence, and the download path (exercised offline through file:// mirror URLs).

The real data sets are taken from $DATA_DIR or ../shared/data; tests that need them skip with a
reason when they are absent. No test touches the network: FETCH_DATA_OFFLINE=1 or file:// mirrors.
"""
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "fetch_data.sh"
REAL = Path(os.environ.get("DATA_DIR", REPO.parent / "shared" / "data")).resolve()

# Published md5 values (shared/data/README.md), independent of the script's own table.
MD5 = {
    "mnist/train-images-idx3-ubyte.gz": "f68b3c2dcbeaaa9fbdd348bbdeb94873",
    "mnist/train-labels-idx1-ubyte.gz": "d53e105ee54ea40749a09fcbcd1e9432",
    "mnist/t10k-images-idx3-ubyte.gz": "9fb629c4189551a2d022fa330f9573f3",
    "mnist/t10k-labels-idx1-ubyte.gz": "ec29112dd5afa0611ce80d1b7f02629c",
    "fashion-mnist/train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "fashion-mnist/train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "fashion-mnist/t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "fashion-mnist/t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}


def have_real_data():
    return all((REAL / rel).is_file() for rel in MD5)


needs_real = pytest.mark.skipif(not have_real_data(), reason=f"real MNIST/Fashion-MNIST files not found in {REAL}")


def md5(path):
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def run(src, dest, **env):
    e = dict(os.environ)
    e.setdefault("FETCH_DATA_OFFLINE", "1")
    e.update(env)
    return subprocess.run(["bash", str(SCRIPT), str(src), str(dest)], capture_output=True, text=True, env=e,
                          timeout=300)


def copy_real(dst):
    for rel in MD5:
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REAL / rel, dst / rel)


def leftovers(dest):
    return sorted(str(p.relative_to(dest)) for p in dest.rglob("*.part"))


def test_usage_error_without_arguments():
    r = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "usage:" in r.stderr


def test_garbage_source_fails_naming_every_file_and_keeps_none(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    for i, rel in enumerate(MD5):
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(b"not the real file %d" % i)
    r = run(src, dest)
    assert r.returncode == 4
    bad_lines = [ln for ln in r.stderr.splitlines() if "md5 mismatch" in ln]
    assert len(bad_lines) == 8
    for rel in MD5:
        assert any(str(dest / rel) + ":" in ln for ln in bad_lines), rel
        assert not (dest / rel).exists()
    assert leftovers(dest) == []


def test_missing_source_offline_names_the_files(tmp_path):
    r = run(tmp_path / "nowhere", tmp_path / "dest")
    assert r.returncode == 4
    for rel in MD5:
        assert str(tmp_path / "dest" / rel) in r.stderr
    assert "FETCH_DATA_OFFLINE" in r.stderr


@needs_real
def test_one_corrupted_source_file_is_named_and_deleted(tmp_path):
    src, dest = tmp_path / "src", tmp_path / "dest"
    copy_real(src)
    bad = "fashion-mnist/t10k-labels-idx1-ubyte.gz"
    data = bytearray((src / bad).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (src / bad).write_bytes(bytes(data))
    r = run(src, dest)
    assert r.returncode == 4
    err_lines = [ln for ln in r.stderr.splitlines() if "md5 mismatch" in ln]
    assert len(err_lines) == 1
    assert str(dest / bad) in err_lines[0]
    assert "deleted" in err_lines[0]
    assert not (dest / bad).exists()
    assert leftovers(dest) == []
    for rel in MD5:
        if rel != bad:
            assert md5(dest / rel) == MD5[rel], rel


@needs_real
def test_good_source_gives_eight_verified_files_and_is_idempotent(tmp_path):
    dest = tmp_path / "dest"
    r = run(REAL, dest)
    assert r.returncode == 0, r.stderr
    assert "all 8 files verified" in r.stdout
    files = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert files == sorted(MD5)
    for rel, want in MD5.items():
        assert md5(dest / rel) == want, rel
    mtimes = {rel: (dest / rel).stat().st_mtime_ns for rel in MD5}
    r2 = run(REAL, dest)
    assert r2.returncode == 0, r2.stderr
    assert r2.stdout.count("present, md5 ok") == 8
    assert {rel: (dest / rel).stat().st_mtime_ns for rel in MD5} == mtimes


@needs_real
def test_a_bad_file_already_in_dest_is_replaced(tmp_path):
    dest = tmp_path / "dest"
    rel = "mnist/train-labels-idx1-ubyte.gz"
    (dest / rel).parent.mkdir(parents=True)
    (dest / rel).write_bytes(b"stale partial download")
    r = run(REAL, dest)
    assert r.returncode == 0, r.stderr
    assert "present but md5 differs" in r.stdout
    assert md5(dest / rel) == MD5[rel]


@needs_real
@pytest.mark.skipif(shutil.which("curl") is None, reason="curl not installed (needed for file:// mirror URLs)")
def test_download_path_through_file_mirrors(tmp_path):
    dest = tmp_path / "dest"
    r = run(tmp_path / "empty-src", dest, FETCH_DATA_OFFLINE="0",
            MNIST_MIRROR=(REAL / "mnist").as_uri() + "/",
            FASHION_MNIST_MIRROR=(REAL / "fashion-mnist").as_uri() + "/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("downloading file://") == 8
    for rel, want in MD5.items():
        assert md5(dest / rel) == want, rel


def test_unreachable_mirror_fails_cleanly(tmp_path):
    dest = tmp_path / "dest"
    missing = (tmp_path / "no-mirror").as_uri() + "/"
    r = run(tmp_path / "empty-src", dest, FETCH_DATA_OFFLINE="0", MNIST_MIRROR=missing, FASHION_MNIST_MIRROR=missing)
    assert r.returncode == 4
    assert r.stderr.count("download from") == 8
    assert leftovers(dest) == []
    assert not any(p.is_file() for p in dest.rglob("*"))
