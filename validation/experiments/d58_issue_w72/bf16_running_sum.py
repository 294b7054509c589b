import numpy as np, sys
def bf16(x, mode="rn"):
    x = np.asarray(x, np.float32); u = x.view(np.uint32).astype(np.uint64)
    if mode == "rn": r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    else: r = (u >> 16) << 16   # toward zero
    return r.astype(np.uint32).view(np.float32)
rng = np.random.default_rng(1)
K = 1024; n = 300_000
for W in (32, 72):
  for mode in ("rn", "rz"):
    p = rng.standard_normal((W, n), dtype=np.float32) * np.float32(np.sqrt(K))
    ref = p.astype(np.float64).sum(0); pb = bf16(p)
    s = np.zeros(n, np.float32)
    for r in range(W): s = bf16(s + pb[r], mode)
    err = np.abs(s - ref)
    print(W, mode, "rel_err %.5f" % np.sqrt((err**2).sum() / (ref**2).sum()), "max %.1f" % err.max(), "std %.2f" % err.std())
