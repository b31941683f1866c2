import collections
def launches(path, complete=True):
    by=collections.defaultdict(list)
    for l in open(path):
        if l.startswith('tl '):
            _,kid,b,g,t0,t1=l.split(); by[(kid,int(g))].append((int(t0),int(t1),int(b)))
    out=[]
    for (kid,g),rs in by.items():
        rs.sort(); L=None; prev=None
        for t0,t1,b in rs:
            if L is None or b in L['blocks'] or t0-prev>40000:
                L={'kid':kid,'g':g,'blocks':{}}; out.append(L)
            L['blocks'][b]=(t0,t1); prev=t0
    return [L for L in out if (not complete) or len(L['blocks'])==L['g']]
