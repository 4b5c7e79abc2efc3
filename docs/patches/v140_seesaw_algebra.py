"""v140's softmax algebra (docs/patches/v140-mla-seesaw.patch, mla/consumer.cuh's run_even / run_odd)
emulated per row in float64 against plain softmax attention: the two warpgroups' running max, their
row sums kept apart, O_L and O_R rescaled as the kernel does, P0 scaled by e^(m0 - m1), rows masked
in part or whole. Needs NumPy: python3 docs/patches/v140_seesaw_algebra.py"""
import numpy as np
rng = np.random.default_rng(1)
def exp2(x): return np.exp2(x)
def ms(m, sl2): return np.where(m == -np.inf, 0.0, m * sl2)
def run(S, V, sl2):  # S: [blocks][rows][64], V: [blocks][64][dv]
    rows = S.shape[1]; dv = V.shape[2]; h = dv // 2
    n = S.shape[0]
    # warpgroup states
    m_w0 = np.full(rows, -np.inf); m_w1 = np.full(rows, -np.inf)
    l0 = np.zeros(rows); l1 = np.zeros(rows)
    OL = np.zeros((rows, h)); OR = np.zeros((rows, h))
    with np.errstate(invalid='ignore', over='ignore'):
        for t in range((n + 1) // 2):
            i0, i1 = 2 * t, 2 * t + 1
            has1 = i1 < n
            # warpgroup 0
            s0 = S[i0]
            m0 = np.maximum(m_w0, s0.max(axis=1))
            scale0 = exp2(m_w0 * sl2 - ms(m0, sl2))
            P0 = exp2(s0 * sl2 - ms(m0, sl2)[:, None])
            l0 = l0 * scale0 + P0.sum(1)
            OL = OL * scale0[:, None] + P0 @ V[i0][:, :h]
            # warpgroup 1
            bm = S[i1].max(axis=1) if has1 else np.full(rows, -np.inf)
            m1 = np.maximum(m0, bm)
            scale = exp2(m_w1 * sl2 - ms(m1, sl2))
            m_w1 = m1
            l1 = l1 * scale
            OR = OR * scale[:, None]
            if has1:
                P1 = exp2(S[i1] * sl2 - ms(m1, sl2)[:, None])
                l1 += P1.sum(1)
                OR += P1 @ V[i1][:, h:]
            # back to warpgroup 0
            scale1 = exp2(m0 * sl2 - ms(m1, sl2)) if has1 else np.ones(rows)
            m_w0 = m1 if has1 else m0
            P0s = P0 * scale1[:, None]
            l0 = l0 * scale1
            if has1:
                OL = OL * scale1[:, None] + P1 @ V[i1][:, :h]
            OR = OR + P0s @ V[i0][:, h:]
    assert np.array_equal(m_w0, m_w1)
    l = l0 + l1
    inv = np.where(l == 0, 0, 1 / np.where(l == 0, 1, l))
    return np.concatenate([OL, OR], 1) * inv[:, None], l, m_w0
for trial in range(200):
    n = rng.integers(1, 8); rows = 8; dv = 16
    S = rng.normal(size=(n, rows, 64)) * rng.uniform(0.1, 20)
    # mask: random causal-like cut and some fully masked rows
    cut = rng.integers(0, n * 64 + 1, size=rows)
    cut[rng.integers(0, rows)] = 0
    key = np.arange(n * 64).reshape(n, 64)
    for r in range(rows):
        S[:, r, :][key >= cut[r]] = -np.inf
    V = rng.normal(size=(n, 64, dv))
    sl2 = rng.uniform(0.05, 0.3)
    O, l, m = run(S, V, sl2)
    Sf = S.transpose(1, 0, 2).reshape(rows, -1); Vf = V.reshape(-1, dv)
    for r in range(rows):
        if cut[r] == 0:
            assert np.all(O[r] == 0), O[r]
            continue
        w = np.exp2((Sf[r] - Sf[r].max()) * sl2); w /= w.sum()
        ref = w @ Vf
        assert np.allclose(O[r], ref, rtol=1e-10, atol=1e-12), (trial, r, np.abs(O[r] - ref).max())
print("seesaw algebra matches softmax attention on 200 random cases")
