# Reads the "gs" lines of probe_grid.py's build (argv: log files) and prints, medians over the
# window's steps, in µs: per grid barrier k of a step, the spread of the blocks' arrivals (first to
# last), the lag from the last arrival to the first release, the spread of the releases, and block 0's
# own wait; which blocks arrive last most often; the update team's busy time per layer against the
# step; the step (block 0's start to its next start).
import collections, statistics, sys

def med(xs):
    return statistics.median(xs) if xs else float("nan")

for path in sys.argv[1:]:
    ev = {}
    for line in open(path, errors="replace"):
        if not line.startswith("gs "):
            continue
        f = line.split()
        t, e = int(f[1]), int(f[2])
        ev[(t, e)] = [int(v) for v in f[3:]]
    if not ev:
        print(f"{path}: no gs lines"); continue
    steps = sorted({t for t, _ in ev})
    print(f"== {path}: {len(steps)} steps, {max(len(v) for v in ev.values())} blocks")
    last = collections.Counter()
    for k in range(5):
        spread, lag, rsp, w0 = [], [], [], []
        for t in steps:
            a, r = ev.get((t, 2 * k)), ev.get((t, 2 * k + 1))
            if not a or not r:
                continue
            a2 = [(v, b) for b, v in enumerate(a) if v >= 0]
            r2 = [v for v in r if v >= 0]
            if not a2 or not r2:
                continue
            amin, amax = min(a2)[0], max(a2)[0]
            spread.append((amax - amin) / 1e3)
            lag.append((min(r2) - amax) / 1e3)
            rsp.append((max(r2) - min(r2)) / 1e3)
            if a[0] >= 0 and r[0] >= 0:
                w0.append((r[0] - a[0]) / 1e3)
            last[max(a2)[1]] += 1
        if spread:
            print(f"barrier {k}: arrivals spread {med(spread):6.2f}  last arrival -> first release {med(lag):5.2f}  "
                  f"releases spread {med(rsp):5.2f}  block 0 waits {med(w0):5.2f}")
    print("blocks arriving last most often (block: times):", ", ".join(f"{b}: {n}" for b, n in last.most_common(8)))
    for name, e0 in (("last hidden layer (+ last layer's columns)", 10), ("the layer below", 12)):
        busy = [statistics.median([(y - x) / 1e3 for x, y in zip(ev[(t, e0)], ev[(t, e0 + 1)]) if x >= 0 and y >= 0])
                for t in steps if (t, e0) in ev and (t, e0 + 1) in ev]
        if busy:
            print(f"update team, {name}: {med(busy):6.2f} µs (median block)")
    st = [(ev[(t + 1, 14)][0] - ev[(t, 14)][0]) / 1e3 for t in steps if (t, 14) in ev and (t + 1, 14) in ev]
    if st:
        print(f"step (block 0, start to start): {med(st):6.2f} µs")
