"""A model of v140's two warpgroups (docs/patches/v140-mla-seesaw.patch: run_even / run_odd, one actor
each) under random interleavings: mbarrier phases (parity waits), wgmma groups completing in order,
TMA loads landing late, per stage and column block. Checks that every GEMM reads the block (or P) it
expects, that no load or store lands on a region under a pending read, that no parity wait aliases,
and that nothing deadlocks, for 0 to 11 blocks. Mutations of the protocol (a load before its wait,
P read before p_ready, ...) are caught within a few hundred runs. python3 this file."""
import random

CB = 9; VL = range(1, 5); VR = range(5, 9)

class Bar:
    def __init__(self): self.k = 0          # completed phases
class Sim:
    def __init__(self, n, rng):
        self.n, self.rng = n, rng
        self.content = {(s, c): None for s in range(2) for c in range(CB)}
        self.loading = {}                   # region -> block landing
        self.full = {(s, c): Bar() for s in range(2) for c in range(CB)}
        self.max_ready = [Bar(), Bar()]; self.p_ready = [Bar(), Bar()]
        self.groups = [[], []]              # per warpgroup: pending gemm groups (list of region reads)
        self.errors = []
    def err(self, msg):
        self.errors.append(msg)
    def pending_reads(self, region):
        return any(region in reads for g in self.groups for reads, _ in g)
    def load(self, i, cbs):
        s = i % 2
        for c in cbs:
            r = (s, c)
            if self.pending_reads(r): self.err(f"load of block {i} over {r} under a pending read")
            if r in self.loading: self.err(f"load of block {i} over {r} still loading")
            self.loading[r] = i
            self.content[r] = "loading"
    def land(self):
        r = self.rng.choice(list(self.loading))
        self.content[r] = ("K", self.loading.pop(r)); self.full[r].k += 1
    def issue(self, w, reads):
        for r, want in reads:
            if self.content[r] != want: self.err(f"wg{w} reads {r}: {self.content[r]} not {want}")
        self.groups[w].append(([r for r, _ in reads], None))
    def complete(self, w):
        self.groups[w].pop(0)
    def write(self, w, region, value, want):
        if self.content[region] != want: self.err(f"wg{w} writes {region} holding {self.content[region]}, not {want}")
        if self.pending_reads(region): self.err(f"wg{w} writes {region} under a pending read")
        self.content[region] = value

def wait_phase(sim, bar, t, what):
    # try_wait.parity(t & 1) passes once phase t completed and phase t + 1 has not
    def ready():
        if bar.k > t + 1: sim.err(f"{what}: phase {t} aliased (k={bar.k})")
        return bar.k % 2 != (t & 1) and bar.k >= t + 1
    return ready

def groups_at_most(sim, w, n):
    return lambda: len(sim.groups[w]) <= n

def even(sim):
    n = sim.n
    t = 0
    while 2 * t < n:
        i0, i1 = 2 * t, 2 * t + 1; has1 = i1 < n
        for c in VL: yield wait_phase(sim, sim.full[(0, c)], t, f"wg0 full(0,{c})")
        sim.issue(0, [((0, c), ("K", i0)) for c in VL])
        if t > 0:
            yield groups_at_most(sim, 0, 1)
            if has1: sim.load(i1, range(0, 5))
        for c in [0, 5, 6, 7, 8]: yield wait_phase(sim, sim.full[(0, c)], t, f"wg0 full(0,{c})")
        sim.issue(0, [((0, c), ("K", i0)) for c in [0, 5, 6, 7, 8]])
        yield groups_at_most(sim, 0, 0)
        sim.max_ready[0].k += 1
        if i0 == n - 1:
            for c in VL: sim.write(0, (0, c), ("K", i0), ("K", i0))  # zero_v_tail
        sim.issue(0, [((0, c), ("K", i0)) for c in VL])                  # d
        if has1: yield wait_phase(sim, sim.max_ready[1], t, "wg0 max_ready1")
        sim.write(0, (0, 0), ("P", i0), ("K", i0)); sim.p_ready[0].k += 1
        yield groups_at_most(sim, 0, 0)
        if i0 + 2 < n: sim.load(i0 + 2, VL)
        if has1:
            yield wait_phase(sim, sim.p_ready[1], t, "wg0 p_ready1")
            for c in VL: yield wait_phase(sim, sim.full[(1, c)], t, f"wg0 full(1,{c})")
            if i1 == n - 1:
                for c in VL: sim.write(0, (1, c), ("K", i1), ("K", i1))
            sim.issue(0, [((1, 0), ("P", i1))] + [((1, c), ("K", i1)) for c in VL])  # g
        t += 1
    yield groups_at_most(sim, 0, 0)

def odd(sim):
    n = sim.n
    t = 0
    while 2 * t < n:
        i0, i1 = 2 * t, 2 * t + 1; has1 = i1 < n
        yield groups_at_most(sim, 1, 0)
        if t > 0: sim.load(i0, [0, 5, 6, 7, 8])
        if has1:
            order = [5, 6, 7, 8, 0, 1, 2, 3, 4]
            for c in order: yield wait_phase(sim, sim.full[(1, c)], t, f"wg1 full(1,{c})")
            sim.issue(1, [((1, c), ("K", i1)) for c in order])
            yield groups_at_most(sim, 1, 0)
        yield wait_phase(sim, sim.max_ready[0], t, "wg1 max_ready0")
        if has1:
            sim.max_ready[1].k += 1
            sim.write(1, (1, 0), ("P", i1), ("K", i1)); sim.p_ready[1].k += 1
            if i1 == n - 1:
                for c in VR: sim.write(1, (1, c), ("K", i1), ("K", i1))
            sim.issue(1, [((1, c), ("K", i1)) for c in VR])                      # e'
        yield wait_phase(sim, sim.p_ready[0], t, "wg1 p_ready0")
        for c in VR: yield wait_phase(sim, sim.full[(0, c)], t, f"wg1 full(0,{c})")
        if i0 == n - 1:
            for c in VR: sim.write(1, (0, c), ("K", i0), ("K", i0))
        sim.issue(1, [((0, 0), ("P", i0))] + [((0, c), ("K", i0)) for c in VR])  # g'
        if has1 and i1 + 2 < n:
            yield groups_at_most(sim, 1, 1)
            sim.load(i1 + 2, VR)
        t += 1
    yield groups_at_most(sim, 1, 0)

def run(n, seed):
    rng = random.Random(seed)
    sim = Sim(n, rng)
    for i in range(min(n, 2)): sim.load(i, range(CB))
    actors = [even(sim), odd(sim)]
    waits = [next(a, None) for a in actors]
    steps = 0
    while any(w is not None for w in waits):
        steps += 1
        choices = [("actor", k) for k, w in enumerate(waits) if w is not None and w()]
        choices += [("gemm", w) for w in range(2) if sim.groups[w]]
        choices += [("land", None)] if sim.loading else []
        if not choices:
            sim.err(f"deadlock at n={n}: waits {[w is not None for w in waits]}")
            break
        kind, k = rng.choice(choices)
        if kind == "actor":
            waits[k] = next(actors[k], None)
        elif kind == "gemm":
            sim.complete(k)
        else:
            sim.land()
        if sim.errors: break
    return sim.errors

bad = 0
for n in range(0, 12):
    for seed in range(3000):
        errors = run(n, seed)
        if errors:
            bad += 1
            if bad < 5: print(n, seed, errors[:3])
print("runs with errors:", bad)
