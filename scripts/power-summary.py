#!/usr/bin/env python3
"""Summarizes nvidia-smi power samples (the `power` step of scripts/gpu-check).

Input: the lines of
  nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,utilization.gpu \
             --format=csv,noheader -lms 50
("2026/12/02 22:50:58.101, 703.50 W, 1515 MHz, 100 %"). Output: the samples under load
(GPU utilization at least --busy percent) with their board power and SM clock (mean, min,
max), the share of them within 5 % of --limit watts (the power cap: at it, a kernel that
does more work per second lowers the clock instead; docs/hopper.md "The power cap"), and
the energy they add up to (mean power x the load's span of timestamps).
"""
import argparse
import datetime
import sys


def parse(path):
    samples = []
    for line in open(path):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            ts = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f")
            watts = float(parts[1].split()[0])
            mhz = float(parts[2].split()[0])
            util = float(parts[3].split()[0])
        except (ValueError, IndexError):
            continue
        samples.append((ts, watts, mhz, util))
    return samples


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--busy", type=float, default=50.0, help="utilization %% that counts as load")
    ap.add_argument("--limit", type=float, default=700.0, help="the board's power limit, W")
    a = ap.parse_args()
    samples = parse(a.csv)
    if not samples:
        print(f"power-summary: no nvidia-smi samples in {a.csv}", file=sys.stderr)
        return 1
    load = [s for s in samples if s[3] >= a.busy]
    print(f"{len(samples)} samples, {len(load)} under load (utilization >= {a.busy:g} %)")
    if not load:
        return 0
    w = [s[1] for s in load]
    c = [s[2] for s in load]
    mean_w = sum(w) / len(w)
    span = (load[-1][0] - load[0][0]).total_seconds()
    capped = sum(1 for x in w if x >= 0.95 * a.limit)
    print(f"power W: mean {mean_w:.1f}, min {min(w):.1f}, max {max(w):.1f}; "
          f"{100.0 * capped / len(w):.0f} % of the samples within 5 % of {a.limit:g} W")
    print(f"SM clock MHz: mean {sum(c) / len(c):.0f}, min {min(c):.0f}, max {max(c):.0f}")
    print(f"load from first to last sample: {span:.2f} s, about {mean_w * span:.0f} J")
    return 0


if __name__ == "__main__":
    sys.exit(main())
