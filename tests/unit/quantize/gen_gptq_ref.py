#!/usr/bin/env python3
"""gen_gptq_ref.py: an independent GPTQ reference for tests/unit/quantize/test_gptq.c.

Run by hand, not by `make test`:

    python3 tests/unit/quantize/gen_gptq_ref.py tests/unit/quantize

It writes gptq_ref_a.txt, gptq_ref_b.txt, gptq_ref_c.txt (4 bits),
gptq_ref_d.txt (3 bits, maxq 7), gptq_ref_e.txt, gptq_ref_f.txt (GPTAQ,
4 bits), and gptq_ref_g.txt (the Quantizer's mse search, norm 2.4). They were produced with Python 3.11 and numpy 2.4 from this script
as committed.

The algorithm is written from the description in
shared/reference/quantization.md section 1.1 (IST-DASLab/gptq fasterquant,
Quantizer.find_params) and 1.3 (static groups), NOT from lib/quantize/gptq.c:
  * the reference's three-step inverse factor (cholesky, cholesky_inverse,
    upper cholesky of H^-1), here in float64 and then rounded to float32
    (gptq.c takes one Cholesky of the reversed matrix and a triangular
    inverse instead, so the factor agrees only to rounding);
  * W1 = W[:, i1:i2] batch copies, the group parameters read from the full W
    (which changes only between batches), the rank-1 updates inside a batch
    and W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:] after it, in float32.
The one deliberate departure from the reference is the grid our files store
(grid.h): the scale is kept as binary16 and the minimum m = fp16(-d * z), codes
are round(x / d) + z on that stored d, and the value fed back is the float32
q * d + m (one product, one sum). The zero z is round(-xmin / scale) on the
float32 scale, as the reference. act-order ties are broken by the lower column
(a stable sort; torch.argsort is not stable, but the cases here have no ties
besides the dead column).

GPTAQ (cases e, f) follows Li et al. 2025 and its reference code
(Intelligent-Computing-Lab-Yale/GPTAQ, GPTAQ.fasterquant), again written from
the description: the target is the float model's output, D = (2/T)(Xf - X)^T X
is the cross term on H's scale, P = alpha * triu(D U^T, 1) U with U the upper
factor above (D permuted like H), and each column's quantization adds
w_i * P[i, j] to every later column j, w_i its value just before rounding. The
one departure: after a lazy batch the reference multiplies P by the batch's
quantized values (W1 then holds them), which makes its result depend on the
batch size; here, as in gptq.c, the pre-rounding values are used, so any
batch size gives the unbatched algorithm. Xf = X + E with E drawn after the
noise (% 5 - 2), so D is exact in float32 as well.

The mse search (case g) is the Quantizer's with mse=True (quantization.md
1.1; GPTQModel's `mse` float): after find_params' widening, for i in 0..79
the range xmin, xmax times p = 1 - i/100 (as float32, numpy's and torch's
weak scalar), scale1 = (xmax1 - xmin1) / maxq, zero1 = round(-xmin1 /
scale1), error sum |scale1 * (clamp(round(x / scale1) + zero1) - zero1) -
x|^norm on the unstored float32 scale; the first least error wins, and its
scale is then stored as above.

Inputs are integers so that C and Python build the same W and H exactly: a
64-bit LCG (state = state * 6364136223846793005 + 1442695040888963407 mod 2^64,
draw = state >> 33) gives W[r][c] = (draw % 2001 - 1000) / 1024 (row-major),
then Z (256 x 4) and A (4 x cols) with draws % 9 - 4 and % 7 - 3, then the
noise (256 x cols) draws % 3 - 1; X = Z A + noise with column 5 set to zero
(a dead input channel), and H = (2/256) X^T X (exact in float32).
"""
import sys

import numpy as np

ROWS, COLS, TOKENS = 8, 96, 256
MAXQ = 15  # 4 bits; case d sets 7 (3 bits)
GROUP = 32


class Lcg:
    def __init__(self, seed):
        self.s = seed

    def next(self):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return self.s >> 33


def inputs(seed):
    g = Lcg(seed)
    W = np.array([[(g.next() % 2001 - 1000) / 1024.0 for _ in range(COLS)] for _ in range(ROWS)],
                 dtype=np.float32)
    Z = np.array([[g.next() % 9 - 4 for _ in range(4)] for _ in range(TOKENS)], dtype=np.int64)
    A = np.array([[g.next() % 7 - 3 for _ in range(COLS)] for _ in range(4)], dtype=np.int64)
    N = np.array([[g.next() % 3 - 1 for _ in range(COLS)] for _ in range(TOKENS)], dtype=np.int64)
    X = Z @ A + N
    X[:, 5] = 0
    H = (X.T @ X).astype(np.float32) * np.float32(2.0 / TOKENS)
    E = np.array([[g.next() % 5 - 2 for _ in range(COLS)] for _ in range(TOKENS)], dtype=np.int64)
    D = (E.T @ X).astype(np.float32) * np.float32(2.0 / TOKENS)
    return W, H, D


def f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


MSE = 0.0  # case g sets 2.4


def find_params(x):
    """Quantizer.find_params (asym, per row) on x (rows, n), stored as fp16."""
    xmin = np.minimum(x.min(axis=1), np.float32(0))
    xmax = np.maximum(x.max(axis=1), np.float32(0))
    both = (xmin == 0) & (xmax == 0)
    xmin[both] = -1
    xmax[both] = 1
    scale = ((xmax - xmin) / np.float32(MAXQ)).astype(np.float32)
    zero = np.round(-xmin / scale).astype(np.float32)
    if MSE > 0:
        best = np.full(x.shape[0], np.inf)
        for i in range(80):
            p = np.float32(1 - i / 100)
            xmin1, xmax1 = p * xmin, p * xmax
            scale1 = ((xmax1 - xmin1) / np.float32(MAXQ)).astype(np.float32)
            zero1 = np.round(-xmin1 / scale1).astype(np.float32)
            q = np.clip(np.round(x / scale1[:, None]) + zero1[:, None], 0, MAXQ)
            e = np.abs((scale1[:, None] * (q - zero1[:, None])).astype(np.float32) - x)
            err = np.sum(e.astype(np.float64) ** MSE, axis=1)
            better = err < best
            best[better] = err[better]
            scale[better] = scale1[better]
            zero[better] = zero1[better]
    d = f16(scale)
    m = f16(-d * zero)
    return d, m, zero


def quantize(x, d, m, zero):
    q = np.clip(np.round(x / d) + zero, 0, MAXQ).astype(np.float32)
    return q, (q * d).astype(np.float32) + m


def gptq(W, H, blocksize, actorder, static_groups, percdamp=0.01, D=None, alpha=0.0):
    W = W.copy()
    H = H.copy()
    n = W.shape[1]
    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0
    groups = []
    if static_groups:
        for i in range(0, n, GROUP):
            groups.append(find_params(W[:, i:i + GROUP]))
    perm = np.arange(n)
    if actorder:
        perm = np.argsort(-np.diag(H), kind="stable")
        W = W[:, perm]
        H = H[perm][:, perm]
        if D is not None:
            D = D[perm][:, perm]
    Hd = H.astype(np.float64)
    Hd[np.arange(n), np.arange(n)] += percdamp * np.mean(np.diag(Hd))
    L = np.linalg.cholesky(Hd)
    Linv = np.linalg.inv(L)
    Hinv = Linv.T @ Linv  # cholesky_inverse
    Hinv = np.linalg.cholesky(Hinv).T.astype(np.float32)  # upper factor
    P = np.zeros((n, n), dtype=np.float32)
    if D is not None:
        U = Hinv.astype(np.float64)
        P = (alpha * (np.triu(D.astype(np.float64) @ U.T, 1) @ U)).astype(np.float32)

    Q = np.zeros_like(W)
    codes = np.zeros(W.shape, dtype=np.int64)
    params = {}
    for i1 in range(0, n, blocksize):
        i2 = min(i1 + blocksize, n)
        W1 = W[:, i1:i2].copy()
        Err1 = np.zeros_like(W1)
        Pre1 = np.zeros_like(W1)  # each column just before rounding
        Hinv1 = Hinv[i1:i2, i1:i2]
        P1 = P[i1:i2, i1:i2]
        for i in range(i2 - i1):
            w = W1[:, i]
            dd = Hinv1[i, i]
            col = i1 + i
            if static_groups:
                d, m, zero = groups[perm[col] // GROUP]
            else:
                if col % GROUP == 0:
                    params[col // GROUP] = find_params(W[:, col:col + GROUP])
                d, m, zero = params[col // GROUP]
            q, v = quantize(w, d, m, zero)
            codes[:, col] = q
            Q[:, col] = v
            err1 = ((w - v) / dd).astype(np.float32)
            Pre1[:, i] = w
            W1[:, i:] -= np.outer(err1, Hinv1[i, i:]).astype(np.float32)
            W1[:, i + 1:] += np.outer(Pre1[:, i], P1[i, i + 1:]).astype(np.float32)
            Err1[:, i] = err1
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]
        W[:, i2:] += Pre1 @ P[i1:i2, i2:]
    stored_perm = actorder and not static_groups
    if not stored_perm:
        inv = np.argsort(perm)
        codes = codes[:, inv]
        perm = np.arange(n)
        groups_out = groups if static_groups else [params[k] for k in sorted(params)]
    else:
        groups_out = [params[k] for k in sorted(params)]
    return perm, codes, groups_out


def write(path, name, W, H, blocksize, actorder, static_groups, maxq=15, D=None, alpha=0.0,
          mse=0.0):
    global MAXQ, MSE
    MAXQ = maxq
    MSE = mse
    perm, codes, groups = gptq(W, H, blocksize, actorder, static_groups, D=D, alpha=alpha)
    kind = "q4_1 (asym 4-bit" if maxq == 15 else "q3z_g32 (asym 3-bit"

    with open(path, "w") as f:
        f.write("# GPTQ reference written by tests/unit/quantize/gen_gptq_ref.py (numpy %s)\n"
                % np.__version__)
        f.write("# case %s: %s, group 32), rows %d cols %d, block %d, "
                "act_order %d, static_groups %d, seed 1\n"
                % (name, kind, ROWS, COLS, blocksize, int(actorder), int(static_groups)))
        f.write("# perm (stored column -> original), then per row: stored codes, then\n"
                "# d m zero of each stored group (d, m as float32 %.9g)\n")
        f.write("params %d %d %d\n" % (blocksize, int(actorder), int(static_groups)))
        if D is not None:
            f.write("gptaq %.9g\n" % alpha)
        if mse > 0:
            f.write("mse %.9g\n" % mse)
        f.write("perm " + " ".join(str(int(p)) for p in perm) + "\n")
        for r in range(ROWS):
            f.write("codes " + " ".join(str(int(c)) for c in codes[r]) + "\n")
            f.write("groups " + " ".join("%.9g %.9g %d" % (g[0][r], g[1][r], int(g[2][r]))
                                         for g in groups) + "\n")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    W, H, D = inputs(1)
    write(out + "/gptq_ref_a.txt", "a", W, H, 128, False, False)
    write(out + "/gptq_ref_b.txt", "b", W, H, 128, True, False)
    write(out + "/gptq_ref_c.txt", "c", W, H, 48, True, True)
    write(out + "/gptq_ref_d.txt", "d", W, H, 128, True, False, maxq=7)
    write(out + "/gptq_ref_e.txt", "e", W, H, 128, True, False, D=D, alpha=1.0)
    write(out + "/gptq_ref_f.txt", "f", W, H, 32, False, False, D=D, alpha=0.25)
    write(out + "/gptq_ref_g.txt", "g", W, H, 128, True, False, mse=2.4)


if __name__ == "__main__":
    main()
