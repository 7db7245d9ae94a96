#!/usr/bin/env python3
"""Issue 6's targets, met or missed, from the files of `scripts/gpu-check targets`.

Usage: scripts/targets-summary.py DIR

DIR holds what that step wrote (any of them may be missing: its targets then read "not
measured"):
  all.json           lcejit-bench --case all --iters 5 --paired --json
  lean.json          lcejit-bench --case A --mode lean --iters 5 --json
  series-cold.log    lcejit-bench --series (a fresh kernel cache), its per-call table
  series-cold.json   ... and its --json
  series-warm.json   lcejit-bench --series again over the cache the cold run left
  check-random.json  lcejit-bench --case A,B --iters 1 --check --json
  check-peaked.json  the same with --logits peaked

A ratio's verdict is taken on the paired ratio where the bench measured one (the op and
cuBLAS timed at the same point of a power-capped card's clock, [Note: paired ratios] in
lcejit-bench.cpp), else on the ratio of the medians; both are printed. A missed target says
by how much. Exits 0 when every file could be read, whatever the verdicts.
"""
import json
import os
import re
import sys

MIB = 1 << 20

# (bench case, issue 6's name, the ratio bound). The bench's W is issue 6's Q (N=2048
# D=8192 V=152064); the bench's Q (N=4096) is issue 5's and has no issue-6 bound.
RATIO_TARGETS = [
    ("A", "A (N=8192 D=4096 V=128256)", 1.00),
    ("B", "B (N=8192 D=2304 V=256000, softcap 30)", 1.00),
    ("C", "C (N=32768 D=4096 V=128256)", 1.00),
    ("S", "S (N=2048 D=4096 V=128256)", 1.10),
    ("W", "Q (N=2048 D=8192 V=152064; the bench's W)", 1.10),
    ("L", "L (N=65536 D=4096 V=128256)", 1.00),
]
WORKSPACE_CASES = ("A", "B", "C")
WORKSPACE_BOUND = 512 * MIB
LEAN_RATIO, LEAN_WORKSPACE = 1.40, 64 * MIB
SERIES_RATIO, COLD_CALL_MS = 1.05, 3000.0
FLOOR_MULTIPLE = 1.2  # fast precision: dH and dW errors at most 1.2x the bf16 floor


def load(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def verdict(value, bound):
    if value is None:
        return "not measured"
    if value <= bound:
        return "met"
    return f"MISSED by {100.0 * (value / bound - 1.0):.1f} %"


def ratio_text(entry):
    text = f"{entry['ratio']:.3f} ({entry['lcejit_ms']:.1f} / {entry['cublas_ms']:.1f} ms)"
    if "paired_ratio" in entry:
        text += (f", paired {entry['paired_ratio']:.3f} "
                 f"({entry['paired_ratio_min']:.3f}-{entry['paired_ratio_max']:.3f})")
    return text


def decisive(entry):
    return entry.get("paired_ratio", entry["ratio"])


def cold_calls(log_path):
    """(N, ms) of each call of a series log that compiled (a bucket's cold first call)."""
    calls = []
    if not os.path.exists(log_path):
        return None
    row = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*([\d.]+)\s*\|(?:[^|]*\|){5}\s*(\d+)\s*\|")
    with open(log_path) as f:
        for line in f:
            m = row.match(line)
            if m and int(m.group(4)) > 0:
                calls.append((int(m.group(2)), float(m.group(3))))
    return calls


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit("usage: targets-summary.py DIR (the files of scripts/gpu-check targets)")
    d = sys.argv[1]
    rows = []  # (target, bound, measured, verdict)

    cases = {e["case"]: e for e in (load(os.path.join(d, "all.json")) or [])}
    for case, name, bound in RATIO_TARGETS:
        e = cases.get(case)
        rows.append((name, f"<= {bound:.2f}x", ratio_text(e) if e else "-",
                     verdict(decisive(e) if e else None, bound)))
    for case in WORKSPACE_CASES:
        e = cases.get(case)
        ws = e["workspace_bytes"] if e else None
        rows.append((f"{case}: workspace", "<= 512 MiB",
                     f"{ws / MIB:.1f} MiB" if ws is not None else "-",
                     verdict(ws, WORKSPACE_BOUND)))

    lean = {e["case"]: e for e in (load(os.path.join(d, "lean.json")) or [])}.get("A")
    rows.append(("lean A", f"<= {LEAN_RATIO:.2f}x", ratio_text(lean) if lean else "-",
                 verdict(decisive(lean) if lean else None, LEAN_RATIO)))
    rows.append(("lean A: workspace", "<= 64 MiB",
                 f"{lean['workspace_bytes'] / MIB:.1f} MiB" if lean else "-",
                 verdict(lean["workspace_bytes"] if lean else None, LEAN_WORKSPACE)))

    warm = load(os.path.join(d, "series-warm.json"))
    if warm:
        r = warm["series_lcejit_ms"] / warm["series_cublas_ms"]
        rows.append(("20-N series, warm disk cache", f"<= {SERIES_RATIO:.2f}x",
                     f"{r:.3f} ({warm['series_lcejit_ms']:.1f} / "
                     f"{warm['series_cublas_ms']:.1f} ms)", verdict(r, SERIES_RATIO)))
        rows.append(("20-N series, warm: NVRTC compiles", "0", str(warm["compiles"]),
                     "met" if warm["compiles"] == 0 else f"MISSED: {warm['compiles']}"))
    else:
        rows.append(("20-N series, warm disk cache", f"<= {SERIES_RATIO:.2f}x", "-",
                     "not measured"))
    calls = cold_calls(os.path.join(d, "series-cold.log"))
    if calls:
        worst = max(ms for _, ms in calls)
        rows.append(("cold first call per bucket (NVRTC included)", "<= 3 s",
                     ", ".join(f"N={n}: {ms / 1000:.2f} s" for n, ms in calls),
                     verdict(worst, COLD_CALL_MS)))
    else:
        rows.append(("cold first call per bucket (NVRTC included)", "<= 3 s", "-",
                     "not measured" if calls is None else "no call compiled (cache not cold)"))

    for data in ("random", "peaked"):
        for e in load(os.path.join(d, f"check-{data}.json")) or [{"case": "A,B"}]:
            if "dh_rel_err" not in e:
                rows.append((f"{e['case']} {data}: dH, dW error (x bf16 floor)",
                             f"<= {FLOOR_MULTIPLE}x", e.get("check", "-"), "not measured"))
                continue
            dh = e["dh_rel_err"] / e["dh_floor"]
            dw = e["dw_rel_err"] / e["dw_bf16_floor"]
            rows.append((f"{e['case']} {data}: dH, dW error (x bf16 floor)",
                         f"<= {FLOOR_MULTIPLE}x", f"dH {dh:.2f}x, dW {dw:.2f}x, loss "
                         f"{e['loss_rel_err']:.1e}", verdict(max(dh, dw), FLOOR_MULTIPLE)))

    widths = [max(len(r[i]) for r in rows + [("target", "bound", "measured", "verdict")])
              for i in range(4)]
    def line(r):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"
    print(line(("target", "bound", "measured", "verdict")))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
    missed = sum(1 for r in rows if r[3].startswith("MISSED"))
    unmeasured = sum(1 for r in rows if r[3] == "not measured")
    print(f"{len(rows) - missed - unmeasured} met, {missed} missed, {unmeasured} not measured")


if __name__ == "__main__":
    main()
