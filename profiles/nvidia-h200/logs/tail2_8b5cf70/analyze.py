"""Reads probe-*.log.gz (probe.py's output) and prints, per run: the GEMM launches of the last full
training step and a half (first/last block entry and exit, us from the first entry of the last
first-layer weight gradient), and that weight gradient's blocks: PDL wait, mainloop, hand-over, and
its 26 last blocks' partial adds and two epilogues. A kernel is named by its problem type's id (the
last 4 hex digits), in a step's order at batch 8,192: the gathered forward (grid 256), the hidden
forward (128), softmax-CE (256), the two backward-data products (one type, 256 each), the side
stream's updates of layers 2 and 1 (one type, grids 256 and 512), the first layer's update (260).
Usage: python3 analyze.py [FOLDER] (default: this script's folder)."""
import glob, gzip, os, statistics, sys, collections

def lines(path):
    with gzip.open(path, 'rt') as f:
        yield from f

def launches(path):  # per (kernel id, grid): blocks grouped into launches (a block id repeats, or a 40 us gap)
    by = collections.defaultdict(list)
    for l in lines(path):
        if l.startswith('tl '):
            _, kid, b, g, t0, t1 = l.split()
            by[(kid, int(g))].append((int(t0), int(t1), int(b)))
    out = []
    for (kid, g), rs in by.items():
        rs.sort(); L = None; prev = None
        for t0, t1, b in rs:
            if L is None or b in L['blocks'] or t0 - prev > 40000:
                L = {'kid': kid, 'g': g, 'blocks': {}}; out.append(L)
            L['blocks'][b] = (t0, t1); prev = t0
    return [L for L in out if len(L['blocks']) == L['g']]

folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
for f in sorted(glob.glob(os.path.join(folder, 'probe-*.log.gz'))):
    rows = [[int(x) for x in l.split()[1:]] for l in lines(f) if l.startswith('probe ') and not l.startswith('probe grid')]
    T = min(r[1] for r in rows)
    us = lambda v: (v - T) / 1e3
    print('==', os.path.basename(f), '(us from the first block entry of the last first-layer weight gradient)')
    Ls = launches(f)
    for L in sorted(Ls, key=lambda L: min(t0 for t0, _ in L['blocks'].values())):
        t0s = [t0 for t0, _ in L['blocks'].values()]; t1s = [t1 for _, t1 in L['blocks'].values()]
        if us(min(t0s)) < -160 or us(min(t0s)) > 80: continue
        print('  kernel %s grid %4d  entry %7.1f .. %7.1f  exit %7.1f .. %7.1f' % (L['kid'][-4:], L['g'], us(min(t0s)), us(max(t0s)), us(min(t1s)), us(max(t1s))))
    last = [r for r in rows if r[5] != 0]
    med = lambda v: statistics.median(v)
    print('  first-layer weight gradient: %d blocks, %d last ones' % (len(rows), len(last)))
    print('    PDL wait over: %.1f .. %.1f; mainloop over: %.1f / %.1f / %.1f (min / median / max)' % (
        min(us(r[2]) for r in rows), max(us(r[2]) for r in rows), min(us(r[3]) for r in rows), med([us(r[3]) for r in rows]), max(us(r[3]) for r in rows)))
    print('    hand-over (partials stored, fence, counter): median %.2f us' % med([(r[4] - r[3]) / 1e3 for r in rows]))
    for name, k in [('partials added', lambda r: r[5] - r[4]), ('epilogue of sub-tile 0', lambda r: r[6] - r[5]),
                    ('epilogue of sub-tile 1', lambda r: r[7] - r[6]), ('mainloop over -> exit', lambda r: r[7] - r[3])]:
        v = [k(r) / 1e3 for r in last]
        print('    last blocks, %-24s median %5.2f  min %5.2f  max %5.2f us' % (name, med(v), min(v), max(v)))
    print('    last exits: %s' % ', '.join('%.1f' % us(r[7]) for r in sorted(last, key=lambda r: r[7])[-4:]))
