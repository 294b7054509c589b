"""Diff two golden files (python -m tests.golden.diff_golden OLD NEW): every difference listed
by kind (a schedule label, a new key); exits 1 if any other value (a number) moved."""
import gzip, json, sys
from collections import Counter

old = json.loads(gzip.decompress(open(sys.argv[1], "rb").read()))
new = json.loads(gzip.decompress(open(sys.argv[2], "rb").read()))
kinds = Counter()
bad = []

def walk(a, b, at):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a.keys() - b.keys():
            bad.append(f"{at}/{k} removed")
        for k in b.keys() - a.keys():
            kinds[f"new key {k}"] += 1
        for k in a.keys() & b.keys():
            walk(a[k], b[k], f"{at}/{k}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            bad.append(f"{at}: length {len(a)} -> {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{at}[{i}]")
    elif a != b:
        field = at.rsplit("/", 1)[-1]
        if isinstance(a, str) and isinstance(b, str) and field in ("schedule", "baseline_schedule"):
            kinds[f"label {a!r} -> {b!r}"] += 1
        else:
            bad.append(f"{at}: {a!r} -> {b!r}")

walk(old, new, "")
for k, n in sorted(kinds.items()):
    print(f"{n:4d}  {k}")
print(f"numbers or other values changed: {len(bad)}")
for line in bad[:20]:
    print("  ", line)
sys.exit(1 if bad else 0)
