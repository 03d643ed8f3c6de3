#!/usr/bin/env python3
"""Summarise the ncu stage's CSV (tools/cuda/run-on-gpu.sh, `ncu --csv
--page raw`) into per-kernel time of one decode step.

    python3 tools/cuda/ncu-summary.py ncu.csv [--step N]

A step is the kernels between two successive `k_hc_mean` launches that
open a forward (the first kernel of each layer stack); --step picks which
one (default: the last complete one, after warm-up). Rows are grouped by
kernel name, grid and block; columns: calls, total and mean µs, dram GB/s.
"""
import csv
import sys


def rows(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith('"ID"') or l.startswith("ID"))
    rd = csv.DictReader(lines[start:])
    out = []
    for r in rd:
        try:
            t = float(r["gpu__time_duration.sum"].replace(",", ""))
        except (KeyError, ValueError):
            continue  # the units row
        b = r.get("dram__bytes_read.sum", "0").replace(",", "")
        out.append((r["Kernel Name"], r.get("Grid Size", ""), r.get("Block Size", ""), t, float(b or 0)))
    return out


def main():
    args = sys.argv[1:]
    step = None
    if "--step" in args:
        i = args.index("--step")
        step = int(args[i + 1])
        del args[i:i + 2]
    rs = rows(args[0])
    opens = [i for i, r in enumerate(rs) if r[0].startswith("k_hc_mean")]
    # A forward opens with k_hc_mean; the sampling kernels close it.
    bounds = []
    for a, b in zip(opens, opens[1:]):
        if b - a > 4:
            bounds.append((a, b))
    if not bounds:
        bounds = [(0, len(rs))]
    a, b = bounds[step if step is not None else -1]
    agg = {}
    for name, grid, block, t, by in rs[a:b]:
        k = (name.split("(")[0], grid, block)
        c = agg.setdefault(k, [0, 0.0, 0.0])
        c[0] += 1
        c[1] += t
        c[2] += by
    tot = sum(c[1] for c in agg.values())
    # ncu reports gpu__time_duration in ns (usecond with some versions:
    # the header's unit row is skipped; values > 1e4 for a 5 ms step mean ns).
    scale = 1e-3 if tot > 1e5 else 1.0
    print(f"kernels {b - a}, time {tot * scale:.1f} us")
    print(f"{'kernel':34} {'grid':>14} {'block':>8} {'calls':>5} {'total us':>9} {'each us':>8} {'GB/s':>7}")
    for k, c in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        us = c[1] * scale
        gbs = c[2] / (us * 1e-6) / 1e9 if us > 0 else 0
        print(f"{k[0][:34]:34} {k[1]:>14} {k[2]:>8} {c[0]:5d} {us:9.1f} {us / c[0]:8.2f} {gbs:7.0f}")


if __name__ == "__main__":
    main()
