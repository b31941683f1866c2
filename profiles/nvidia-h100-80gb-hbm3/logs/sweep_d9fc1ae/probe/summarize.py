"""Medians of the probe's stamps (us after the block's PDL wait; 'pdl': block start to after the wait), by run and kernel."""
import collections, glob, os, re, statistics as st
here = os.path.dirname(os.path.abspath(__file__))
rows = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(here, "h*-pdl*.log"))):
    tag = os.path.basename(f)[:-4]
    for line in open(f):
        if not line.startswith("PROBE"):
            continue
        kind = line.split()[1]
        shape = re.search(r"N=\d+ K=\d+" if kind == "staged" else r"K=\d+", line).group(0)
        rows[(tag, kind, shape)].append(dict((a, int(b)) for a, b in re.findall(r"(\w[\w+]*) (\d+)", line.split("ns:")[1])))
for key, vs in rows.items():
    parts = " ".join("%s %.2f" % (k, st.median([v[k] - v["pdl"] for v in vs]) / 1e3) for k in vs[0] if k != "pdl")
    print("%-14s %-7s %-14s %s | pdl %.2f (%d launches)" % (key + (parts, st.median(v["pdl"] for v in vs) / 1e3, len(vs))))
