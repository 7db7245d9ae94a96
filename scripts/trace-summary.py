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
    over cuBLAS's share: block 0 fwd +MS, dA +MS, dB +MS; K later blocks, summed: fwd +MS,
      dA +MS, dB +MS; rest MS; in all +MS (the trace MS against cuBLAS's GEMMs alone MS)

The last line, where the log has the case's run schedule (`C: N = ...: 1 row block of R
rows, ... then K row blocks of R' rows` or `K row blocks of R rows, ...`) and the trace's
`cuBLAS, each GEMM alone` times: each block's forward, dA and dB against cuBLAS's Z, dH
and dW alone times the block's share of the rows (the last block's rows are what N
leaves), so that where a case's excess lies reads off one line (docs/hopper.md, session 43:
B's is its later blocks' dB).

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
# The trace's per-kernel table (`| name | launches | total ms | mean ms | share |`): a call
# of one row block prints no per-block table, and is its one block.
KERNEL_ROW = re.compile(r"^\s*\|\s*([A-Za-z]\w*)\s*\|\s*\d+\s*\|\s*([\d.]+)\s*\|\s*[\d.]+\s*\|"
                        r"\s*[\d.]+ %\s*\|")
KERNEL = re.compile(r"(\w+) (\d+)x ([\d.]+)")
PLAN = re.compile(r"^" + CASE + r": N = (\d+): ([^;]*)")
SLAB_PLAN = re.compile(r"^1 row block of (\d+) rows, \d+ slabs(?:.*then (\d+) row blocks? of (\d+) rows)?")
CHUNK_PLAN = re.compile(r"^(\d+) row blocks? of (\d+) rows, \d+ chunks?")
ALONE = re.compile(r"cuBLAS, each GEMM alone \(median of \d+\): Z ([\d.]+) ms, dH ([\d.]+) ms, "
                   r"dW ([\d.]+) ms")
ROLES = (("fwd", re.compile(r"_fwd\d")), ("dA", re.compile(r"_dlhs\d")),
         ("dB", re.compile(r"_drhs\d")))


def role(name):
    for r, pattern in ROLES:
        if pattern.search(name):
            return r
    return "rest"


def no_times():
    return {"fwd": 0.0, "dA": 0.0, "dB": 0.0, "rest": 0.0}


def block_rows(n, schedule):
    """The rows of each row block of a run schedule's text, or None if it is neither form."""
    m = SLAB_PLAN.match(schedule)
    if m:
        first = int(m.group(1))
        rows = [first] + ([int(m.group(3))] * int(m.group(2)) if m.group(2) else [])
    else:
        m = CHUNK_PLAN.match(schedule)
        if not m:
            return None
        rows = [int(m.group(2))] * int(m.group(1))
    # The last block takes what the others leave of N.
    rows[-1] = n - sum(rows[:-1])
    return rows if rows[-1] > 0 else None


def parse(path):
    """{case: {"result": (op, blas, ratio) or None, "paired": (ratio, lo, hi) or None,
    "total": ms, "blocks": [{role: ms}], "rows": [rows of each block] or None,
    "alone": (Z, dH, dW) ms or None, "kernels": {role: ms} of the kernel table or None}}"""
    cases, current = {}, None

    def entry(c):
        return cases.setdefault(c, {"result": None, "paired": None, "total": None,
                                    "blocks": [], "rows": None, "alone": None,
                                    "kernels": None})

    for line in open(path):
        m = PLAN.match(line)
        if m:
            entry(m.group(1))["rows"] = block_rows(int(m.group(2)), m.group(3))
            continue
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
        m = ALONE.search(line)
        if m:
            current["alone"] = tuple(float(m.group(i)) for i in (1, 2, 3))
            continue
        m = KERNEL_ROW.match(line)
        if m:
            if current["kernels"] is None:
                current["kernels"] = no_times()
            current["kernels"][role(m.group(1))] += float(m.group(2))
            continue
        m = BLOCK.match(line)
        if m:
            times = no_times()
            for name, _, ms in KERNEL.findall(m.group(2)):
                times[role(name)] += float(ms)
            current["blocks"].append(times)
    for v in cases.values():
        if not v["blocks"] and v["kernels"]:
            v["blocks"] = [v["kernels"]]
    return {c: v for c, v in cases.items() if v["blocks"] or v["result"]}


def fmt_block(b):
    return "fwd {:.2f}, dA {:.2f}, dB {:.2f}, rest {:.2f} ms".format(b["fwd"], b["dA"], b["dB"],
                                                                     b["rest"])


def excess_line(v):
    """Each block's forward, dA and dB over cuBLAS's Z, dH and dW alone times the block's
    share of the rows; None where the log lacks the schedule, the times alone, or the
    schedule's blocks are not the trace's (an accumulating call's schedule)."""
    rows, alone, blocks = v["rows"], v["alone"], v["blocks"]
    if not rows or not alone or len(rows) != len(blocks):
        return None
    n = float(sum(rows))
    over = [{r: b[r] - a * k / n for r, a in zip(("fwd", "dA", "dB"), alone)}
            for b, k in zip(blocks, rows)]
    line = "  over cuBLAS's share: block 0 fwd {:+.2f}, dA {:+.2f}, dB {:+.2f}".format(
        over[0]["fwd"], over[0]["dA"], over[0]["dB"])
    if len(over) > 1:
        line += "; {} later block{}, summed: fwd {:+.2f}, dA {:+.2f}, dB {:+.2f}".format(
            len(over) - 1, "s" if len(over) > 2 else "",
            *(sum(o[r] for o in over[1:]) for r in ("fwd", "dA", "dB")))
    rest = sum(b["rest"] for b in blocks)
    kernels = sum(b[r] for b in blocks for r in ("fwd", "dA", "dB", "rest"))
    line += "; rest {:.2f}; in all {:+.2f} ms ({:.2f} against cuBLAS's GEMMs alone {:.2f})".format(
        rest, kernels - sum(alone), kernels, sum(alone))
    return line


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
            line = excess_line(v)
            if line:
                print(line)
    if not found:
        print("trace-summary: no lcejit-bench results or traces in " + ", ".join(args.logs),
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
