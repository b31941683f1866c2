"""Reading run records (schema v1, profiles/README.md) and the companion files next to them.

Everything here is pure data handling: no plotting, no Markdown. A record that cannot be used is
never an exception for the caller: it becomes a `Skipped(path, problem)` entry that the report
lists by name.
"""
from __future__ import annotations

import csv
import json
import math
import os
import re
from dataclasses import dataclass, field

SCHEMA = "cuda-notebook-run-record"
SCHEMA_VERSION = 1
RECORD_NAME = re.compile(r"^(?P<phase>[A-Za-z0-9_.-]+?)__(?P<tag>[A-Za-z0-9_+-]+)\.json$")
ISO_TIME = re.compile(r"^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(\.\d+)?Z$")


def slugify(name: str) -> str:
    """The device slug rule of common/device_info.h: lower case, runs of other chars -> '-'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def num(x):
    """A finite float, or None (null, missing, bool, string, NaN)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def dget(d, *keys, default=None):
    """Nested dict lookup that never raises: dget(rec, 'timing', 'total_ms', 'median')."""
    cur = d
    for k in keys:
        if not isinstance(cur, dict) or k not in cur:
            return default
        cur = cur[k]
    return cur


def as_list(x):
    return x if isinstance(x, list) else []


@dataclass
class Skipped:
    path: str      # repository-relative path, e.g. profiles/nvidia-h100/phase1_naive__x.json
    problem: str


@dataclass
class Record:
    path: str                 # repository-relative (as given under the profiles root's parent)
    abspath: str
    data: dict
    folder_slug: str
    tag: str
    phase: str = ""
    workload: str = ""
    impl: str = ""
    slug: str = ""
    device_name: str = ""
    date: str = ""            # YYYY-MM-DD from utc_time
    utc_time: str = ""
    problems: list = field(default_factory=list)
    quick: bool = False       # read from profiles/<slug>/quick/ (make run's quick notebook)

    @property
    def file(self) -> str:
        return os.path.basename(self.path)

    @property
    def config(self) -> dict:
        c = self.data.get("config")
        return c if isinstance(c, dict) else {}

    @property
    def status(self) -> str:
        s = self.data.get("status")
        return s if isinstance(s, str) else "?"

    def cfg_num(self, key):
        return num(self.config.get(key))

    def total_ms(self, stat="median"):
        return num(dget(self.data, "timing", "total_ms", stat))

    def metric(self, key):
        return num(dget(self.data, "metrics", key))


def check_record(data) -> str:
    """"" if the document is a usable schema-v1 record, else a one-line problem."""
    if not isinstance(data, dict):
        return "top level is not a JSON object"
    if data.get("schema") != SCHEMA:
        return f"schema is {json.dumps(data.get('schema'))}, expected \"{SCHEMA}\""
    v = data.get("schema_version")
    if isinstance(v, bool) or not isinstance(v, int):
        return f"schema_version is {json.dumps(v)}, expected the integer {SCHEMA_VERSION}"
    if v != SCHEMA_VERSION:
        return f"schema_version is {v}; this report reads version {SCHEMA_VERSION} only"
    for key in ("phase", "workload", "implementation", "status"):
        if not isinstance(data.get(key), str) or not data.get(key):
            return f"field '{key}' is missing or not a non-empty string"
    if not isinstance(data.get("config"), dict):
        return "field 'config' is missing or not an object"
    if not isinstance(dget(data, "device", "name"), str):
        return "field 'device.name' is missing or not a string"
    t = data.get("utc_time")
    if not isinstance(t, str) or not ISO_TIME.match(t):
        return f"field 'utc_time' is {json.dumps(t)}, expected ISO 8601 like 2026-11-22T10:00:00Z"
    if not isinstance(dget(data, "timing", "method"), str):
        return "field 'timing.method' is missing or not a string"
    tm = dget(data, "timing", "total_ms")
    if tm is not None and not isinstance(tm, dict):
        return "field 'timing.total_ms' is not an object"
    for key in ("kernels", "memcpy", "ranges", "notes"):
        if key in data and data[key] is not None and not isinstance(data[key], list):
            return f"field '{key}' is not an array"
    for key in ("metrics", "loss", "validation", "efficiency", "peaks", "software", "git", "host"):
        if key in data and data[key] is not None and not isinstance(data[key], dict):
            return f"field '{key}' is not an object"
    return ""


def _load_json(path):
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    # JSON has no NaN/Infinity; a record holding them was not written by our writer.
    def bad_constant(name):
        raise ValueError(f"non-JSON constant {name} (non-finite numbers must be null)")
    return json.loads(text, parse_constant=bad_constant)


QUICK_DIR = "quick"  # profiles/<slug>/quick/: the records of `make run`'s quick notebook


def load_profiles(profiles_dir: str, rel_base: str | None = None, shadowed: list | None = None):
    """Reads every profiles/<slug>/*.json and profiles/<slug>/quick/*.json (the quick notebook's
    records: `quick` is True and run_mode says "quick" whatever the file says). Returns (records,
    skipped, others) where others lists JSON files that are not named like a record (traces etc.), as
    repository-relative paths. A quick record whose slot (its device folder, phase and tag) a full
    run's usable record (status ok, not run_mode quick) fills is left out: the full one wins; when
    `shadowed` is a list, those quick records are appended to it.
    rel_base: the folder paths are reported relative to (default: the parent of profiles_dir)."""
    profiles_dir = os.path.abspath(profiles_dir)
    rel_base = os.path.abspath(rel_base or os.path.dirname(profiles_dir))
    records, skipped, others = [], [], []
    if not os.path.isdir(profiles_dir):
        return records, skipped, others
    for slug_dir in sorted(os.listdir(profiles_dir)):
        full_dir = os.path.join(profiles_dir, slug_dir)
        if not os.path.isdir(full_dir):
            continue
        mine = _load_folder(full_dir, slug_dir, rel_base, False, skipped, others)
        quick_dir = os.path.join(full_dir, QUICK_DIR)
        if os.path.isdir(quick_dir):
            full_slots = {record_slot(r) for r in mine if r.status == "ok" and r.data.get("run_mode") != "quick"}
            for r in _load_folder(quick_dir, slug_dir, rel_base, True, skipped, others):
                if record_slot(r) in full_slots:
                    if shadowed is not None:
                        shadowed.append(r)
                else:
                    mine.append(r)
        records += mine
    records.sort(key=lambda r: (r.slug, r.path))
    return records, skipped, others


def record_slot(r):
    """The slot a record fills for the full-over-quick rule: its device folder, phase and tag."""
    return (r.folder_slug, r.phase, r.tag)


def _load_folder(folder, slug_dir, rel_base, quick, skipped, others):
    """The records of one folder (profiles/<slug_dir>/, or its quick/ subfolder when quick)."""
    where = f"profiles/{slug_dir}/" + (f"{QUICK_DIR}/" if quick else "")
    out = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        abspath = os.path.join(folder, name)
        rel = os.path.relpath(abspath, rel_base).replace(os.sep, "/")
        m = RECORD_NAME.match(name)
        if not m:
            others.append(rel)
            continue
        try:
            data = _load_json(abspath)
        except (OSError, UnicodeDecodeError) as e:
            skipped.append(Skipped(rel, f"cannot read: {e.__class__.__name__}: {e}"))
            continue
        except ValueError as e:
            skipped.append(Skipped(rel, f"not valid JSON: {e}"))
            continue
        problem = check_record(data)
        if problem:
            skipped.append(Skipped(rel, problem))
            continue
        r = Record(path=rel, abspath=abspath, data=data, folder_slug=slug_dir, tag=m.group("tag"), quick=quick)
        r.phase = data["phase"]
        r.workload = data["workload"]
        r.impl = data["implementation"]
        # phase 5 records its own-kernel runs as "cuda" whatever the launch and precision: tell its
        # --launch persistent runs (one cooperative kernel per epoch; --launch pipelined: rung 5e's), --launch cluster runs (one
        # thread-block cluster kernel per epoch, fp16), --launch cluster32 runs (rung 5f: fp32 in one cluster) and --launch grid
        # runs (rung 5g: W2 in fp16 in one cooperative kernel over up to every SM) from the graph path, and fp16 from fp32
        prec = (data.get("config") or {}).get("precision") if isinstance(data.get("config"), dict) else None
        launch = (data.get("config") or {}).get("launch") if isinstance(data.get("config"), dict) else None
        if r.impl == "cuda" and data.get("phase") == "phase5_batched":
            if launch == "persistent":
                r.impl = "cuda-persistent"
            elif launch == "pipelined":
                r.impl = "cuda-pipelined"
            elif launch == "cluster32":
                r.impl = "cuda-cluster32"
            elif launch == "cluster":
                r.impl = "cuda-cluster"
            elif launch == "grid":
                r.impl = "cuda-grid"
            elif prec == "fp16":
                r.impl = "cuda-fp16"
        dev_slug = dget(data, "device", "slug")
        r.slug = dev_slug if isinstance(dev_slug, str) and dev_slug else slug_dir
        r.device_name = data["device"]["name"]
        r.utc_time = data["utc_time"]
        r.date = r.utc_time[:10]
        if m.group("phase") != r.phase:
            r.problems.append(f"file name says phase '{m.group('phase')}', record says '{r.phase}'")
        if r.slug != slug_dir:
            r.problems.append(f"stored under {where} but device.slug is '{r.slug}'")
        if quick and data.get("run_mode") != "quick":
            # the folder decides: the report's full-over-quick preference reads run_mode
            if "run_mode" in data:
                r.problems.append(f"stored under {where} but run_mode is {json.dumps(data.get('run_mode'))}")
            data["run_mode"] = "quick"
        out.append(r)
    return out


# ------------------------------------------------------------------ companion files

def read_chrome_trace(path):
    """Returns (events, thread_names, process_names, problem). events: list of dicts with
    name, ts (µs, float), dur (µs), pid, tid, cat (str) for every complete ('X') event."""
    try:
        data = _load_json(path)
    except (OSError, ValueError, UnicodeDecodeError) as e:
        return [], {}, {}, f"cannot read trace: {e}"
    evs = data.get("traceEvents") if isinstance(data, dict) else data if isinstance(data, list) else None
    if not isinstance(evs, list):
        return [], {}, {}, "no traceEvents array"
    out, tnames, pnames = [], {}, {}
    for e in evs:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph == "M":
            nm = dget(e, "args", "name")
            if isinstance(nm, str):
                if e.get("name") == "thread_name":
                    tnames[(str(e.get("pid")), str(e.get("tid")))] = nm
                elif e.get("name") == "process_name":
                    pnames[str(e.get("pid"))] = nm
            continue
        if ph != "X":
            continue
        ts, dur = num(e.get("ts")), num(e.get("dur"))
        if ts is None or dur is None or not isinstance(e.get("name"), str):
            continue
        out.append({"name": e["name"], "ts": ts, "dur": dur, "pid": str(e.get("pid")),
                    "tid": str(e.get("tid")), "cat": str(e.get("cat") or "")})
    out.sort(key=lambda e: (e["ts"], e["pid"], e["tid"], e["name"], e["dur"]))
    return out, tnames, pnames, ""


def read_csv_table(path, header_key):
    """Rows (dicts) of a CSV whose header line contains header_key; lines before it (tool chatter)
    are skipped. Returns (rows, problem)."""
    try:
        with open(path, "r", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        return [], f"cannot read: {e}"
    start = next((i for i, ln in enumerate(lines) if header_key in ln), None)
    if start is None:
        return [], f"no header line with '{header_key}'"
    rows = list(csv.DictReader(lines[start:]))
    return rows, ""


def parse_nsys_kern_sum(path):
    """nsys stats cuda_gpu_kern_sum CSV -> [{name, calls, total_ns}] or problem."""
    rows, problem = read_csv_table(path, "Name")
    if problem:
        return [], problem
    out = []
    for row in rows:
        name = row.get("Name")
        total = _num_str(row.get("Total Time (ns)"))
        calls = _num_str(row.get("Instances") or row.get("Count"))
        if name is None or total is None or calls is None:
            return [], "columns 'Name', 'Total Time (ns)', 'Instances' not found"
        out.append({"name": name, "calls": int(calls), "total_ns": total})
    return out, ""


def _num_str(s):
    if s is None:
        return None
    try:
        v = float(str(s).replace(",", ""))
    except ValueError:
        return None
    return v if math.isfinite(v) else None


# What a details page's headline is: the speed-of-light section when the profile has it
# (`make ncu`), else the warp-state and instruction counts of a stalls profile (`make ncu STALLS=1`)
# with the two launch facts that bound them.
NCU_STALL_SECTIONS = ("Warp State Statistics", "Instruction Statistics")
NCU_LAUNCH_METRICS = ("Registers Per Thread", "Block Size", "Grid Size", "Dynamic Shared Memory Per Block")


def parse_ncu_details(path):
    """ncu --csv --page details -> [{kernel, section, metric, unit, value}] for the speed-of-light
    section (the headline numbers of a kernel), or, in a profile without it, the warp-state and
    instruction statistics and a few launch facts; or problem."""
    rows, problem = read_csv_table(path, "Metric Name")
    if problem:
        return [], problem

    def pick(keep):
        out = []
        for row in rows:
            sec, metric = row.get("Section Name") or "", row.get("Metric Name") or ""
            if keep(sec, metric):
                out.append({"kernel": row.get("Kernel Name") or "?", "section": sec, "metric": metric or "?",
                            "unit": row.get("Metric Unit") or "", "value": row.get("Metric Value") or ""})
        return out
    sol = pick(lambda sec, m: "Speed Of Light" in sec)
    if sol:
        return sol, ""
    return pick(lambda sec, m: sec in NCU_STALL_SECTIONS or (sec == "Launch Statistics" and m in NCU_LAUNCH_METRICS)), ""
