#!/usr/bin/env python3
"""Summarizes `lcejit-bench --case ...` logs (or `--tokens N ...`, whose case is `custom`):
results, paired ratios and launch traces.

Every session that compares two builds or two knob settings reads the same things out of
the logs: each case's op and cuBLAS medians, its paired ratio (--paired), and from the
trace (--trace) its first row block (the slab block: the stored values in dW's memory)
and its later, ordinary blocks, each split into the forward (`_fwd`), dA (`_dlhs`) and dB
(`_drhs`, its column parts summed) and the rest. Input: one or more logs (their `| C |
N | ...` result rows, the `paired, ...` table, and `C trace:` sections with the `per row
block:` table, as lcejit-bench prints them; other lines are skipped). Output, per log and
case (what the log has of it):

  LOG  CASE  op MS / cuBLAS MS (RATIO)  paired RATIO (LO-HI)  trace MS
    block 0: fwd MS, dA MS, dB MS, rest MS
    K later blocks, mean: fwd MS, dA MS, dB MS (MIN-MAX), rest MS

Per-kernel figures compare only within one case and round (docs/hopper.md, session 35: a
traced call can run at another clock than the timed ones).
"""
import argparse
import re
import sys

# A case letter, or `custom` for a `--tokens N` run.
CASE = r"([A-Z]|custom)"
RESULT = re.compile(r"^\| " + CASE + r" \| (\d+) \| (\d+) \| (\d+) \| [^|]* \| ([\d.]+) \| [\d.]+ \| "
                    r"([\d.]+) \| [\d.]+ \| ([\d.]+) \|")
PAIRED = re.compile(r"^\| " + CASE + r" \| [\d.]+ \| [\d.]+ \| ([\d.]+) \| ([\d.]+)-([\d.]+) \|")
TRACE = re.compile(r"^" + CASE + r" trace:")
TOTAL = re.compile(r"one call, \d+ launches back to back: ([\d.]+) ms in kernels")
BLOCK = re.compile(r"^\s*\|\s*(\d+)\s*\|\s*\d+\s*\|\s*[\d.]+\s*\|(.*)\|\s*$")
KERNEL = re.compile(r"(\w+) (\d+)x ([\d.]+)")
ROLES = (("fwd", re.compile(r"_fwd\d")), ("dA", re.compile(r"_dlhs\d")),
         ("dB", re.compile(r"_drhs\d")))


def role(name):
    for r, pattern in ROLES:
        if pattern.search(name):
            return r
    return "rest"


def parse(path):
    """{case: {"result": (op, blas, ratio) or None, "paired": (ratio, lo, hi) or None,
    "total": ms, "blocks": [{role: ms}]}}"""
    cases, current = {}, None

    def entry(c):
        return cases.setdefault(c, {"result": None, "paired": None, "total": None,
                                    "blocks": []})

    for line in open(path):
        m = RESULT.match(line)
        if m:
            entry(m.group(1))["result"] = tuple(float(m.group(i)) for i in (5, 6, 7))
            continue
        m = PAIRED.match(line)
        if m:
            entry(m.group(1))["paired"] = tuple(float(m.group(i)) for i in (2, 3, 4))
            continue
        m = TRACE.match(line)
        if m:
            current = entry(m.group(1))
            continue
        if current is None:
            continue
        m = TOTAL.search(line)
        if m:
            current["total"] = float(m.group(1))
            continue
        m = BLOCK.match(line)
        if m:
            times = {"fwd": 0.0, "dA": 0.0, "dB": 0.0, "rest": 0.0}
            for name, _, ms in KERNEL.findall(m.group(2)):
                times[role(name)] += float(ms)
            current["blocks"].append(times)
    return {c: v for c, v in cases.items() if v["blocks"] or v["result"]}


def fmt_block(b):
    return "fwd {:.2f}, dA {:.2f}, dB {:.2f}, rest {:.2f} ms".format(b["fwd"], b["dA"], b["dB"],
                                                                     b["rest"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("logs", nargs="+", help="lcejit-bench --trace logs")
    args = ap.parse_args()
    found = False
    for path in args.logs:
        for case, v in parse(path).items():
            found = True
            r = v["result"]
            head = "{}  {}".format(path, case)
            if r:
                head += "  op {:.1f} / cuBLAS {:.1f} ms ({:.2f})".format(*r)
            if v["paired"]:
                head += "  paired {:.3f} ({:.3f}-{:.3f})".format(*v["paired"])
            if v["total"] is not None:
                head += "  trace {:.1f} ms".format(v["total"])
            print(head)
            if not v["blocks"]:
                continue
            first, later = v["blocks"][0], v["blocks"][1:]
            print("  block 0: " + fmt_block(first))
            if later:
                mean = {k: sum(b[k] for b in later) / len(later) for k in first}
                dbs = [b["dB"] for b in later]
                print("  {} later block{}, mean: fwd {:.2f}, dA {:.2f}, dB {:.2f} ({:.2f}-{:.2f}), "
                      "rest {:.2f} ms".format(len(later), "s" if len(later) > 1 else "",
                                               mean["fwd"], mean["dA"], mean["dB"], min(dbs),
                                               max(dbs), mean["rest"]))
    if not found:
        print("trace-summary: no lcejit-bench results or traces in " + ", ".join(args.logs),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
