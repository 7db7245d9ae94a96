#!/usr/bin/env python3
"""Summarizes an ncu source page (`ncu --section SourceCounters --page source
--print-source sass --csv`, one kernel launch): where the warps' stall samples went.

    scripts/ncu-source-summary.py FILE.csv [--top N]

Prints the samples per group of instructions that ran equally often (a loop body: the
mainloop per k-block, the epilogue per tile, the producer per load), the stall reasons
overall, and the N instructions with the most samples. That is how the wgmma forward's
descriptor overhead was found (docs/hopper.md, [Note: sm90 descriptor arithmetic]).
"""
import argparse
import collections
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    text = open(args.csv, encoding="utf-8", errors="replace").read()
    start = text.find('"Address"')
    if start < 0:
        sys.exit(f"{args.csv}: no source table (was it --page source --csv?)")
    rows = list(csv.reader(text[start:].splitlines()))
    head, rows = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    col = {name: i for i, name in enumerate(head)}
    for need in ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"):
        if need not in col:
            sys.exit(f"{args.csv}: no column '{need}'")
    samples = col["Warp Stall Sampling (All Samples)"]
    executed = col["Instructions Executed"]
    stalls = [i for i, name in enumerate(head)
              if name.startswith("stall_") and "Not Issued" not in name]
    total = sum(number(r[samples]) for r in rows) or 1.0

    groups = collections.defaultdict(lambda: [0.0, 0])
    for r in rows:
        g = groups[number(r[executed])]
        g[0] += number(r[samples])
        g[1] += 1
    print(f"{len(rows)} instructions, {total:.0f} stall samples")
    print("\nby execution count (instructions that ran equally often: one loop body):")
    print(f"  {'executed':>12} {'instructions':>12} {'samples':>9} {'share':>6}")
    for count, (s, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:10]:
        print(f"  {count:12.0f} {n:12d} {s:9.0f} {100 * s / total:5.1f}%")

    print("\nstall reasons:")
    reasons = sorted(((head[i], sum(number(r[i]) for r in rows)) for i in stalls),
                     key=lambda kv: -kv[1])
    for name, s in reasons[:10]:
        print(f"  {name:28} {s:9.0f} {100 * s / total:5.1f}%")

    print(f"\ntop {args.top} instructions by samples:")
    for r in sorted(rows, key=lambda r: -number(r[samples]))[:args.top]:
        why = sorted(((head[i], number(r[i])) for i in stalls), key=lambda kv: -kv[1])[0]
        print(f"  {r[0][-6:]:>6} {number(r[samples]):8.0f} x{number(r[executed]):<10.0f} "
              f"{r[col['Source']].strip()[:60]:60} {why[0]}")


if __name__ == "__main__":
    main()
