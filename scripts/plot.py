#!/usr/bin/env python3
"""Figures of an attn-bench results CSV, one per question (`attn-bench report plot` calls this).

  plot.py RESULTS.csv --out DIR [--baseline BACKEND]

Writes DIR/{throughput,roofline,speedup,accuracy}.{png,svg}:
  throughput  decodes in GB/s and prefills/mixed steps in TFLOP/s against the mean context length,
              one line per (backend, batch size)
  roofline    achieved TFLOP/s against arithmetic intensity (FLOPs / byte), with the device's
              measured copy-bandwidth and matrix ceilings (recovered from the % of peak columns)
  speedup     each backend's median time over the baseline backend's, per case (a sweep's case
              names end in :BACKEND; rows are paired on the name without it)
  accuracy    err_over_floor (rel_l2 over the precision floor) per backend and case, with the
              default bf16 gate (1.6); rel_l2 where the floor was not measured
Only rows with status pass or fail carry numbers; timed figures use rows with samples > 0. A
figure with nothing to draw says why on one line (and on the figure) rather than showing empty axes.
"""
import argparse
import csv
import math
import os
import re
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: searchable, editable
    import matplotlib.pyplot as plt
except ImportError as e:  # the CLI reports this as a runtime error with the reason
    sys.exit(f"plot.py: matplotlib is not available ({e}); install Debian's python3-matplotlib")


def num(r, key, default=0.0):
    try:
        return float(r.get(key, "") or default)
    except ValueError:
        return default


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {path}: no result rows")
    for col in ("scenario", "backend", "status"):
        if col not in rows[0]:
            sys.exit(f"plot.py: {path}: not an attn-bench results CSV (no '{col}' column)")
    return rows


def checked(r):
    return r["status"] in ("pass", "fail")


def timed(r):
    return checked(r) and num(r, "samples") > 0 and num(r, "median_time_us") > 0


def case_of(r):
    """The case a row measures, the same for every backend: a sweep names its cases
    PRESET:NxQ@C[...]:BACKEND (docs/SCENARIOS.md), so the backend suffix is dropped to pair
    rows of different backends; other scenario names are the case as they are."""
    name, _, suffix = r["scenario"].rpartition(":")
    return name if name and suffix.lower() == r["backend"].lower() else r["scenario"]


def natural_key(name):
    # Numbers compare as numbers: 1x16@128 before 1x16@1024, 4x1 before 16x1.
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name) if p]


def nothing_to_draw(ax, name, why):
    # Said on the console, where a reader of `report plot` looks, and on the figure itself (a
    # figure from an earlier run must not be left in its place), not as a legend over empty axes.
    print(f"plot.py: {name}: nothing to draw: {why}")
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, transform=ax.transAxes)


def fail_to_write(path, e):
    # One line naming the file (the CLI adds its own), not a traceback through matplotlib.
    sys.exit(f"plot.py: cannot write {path}: {e.strerror or e}")


def save(fig, out, name):
    fig.tight_layout()
    for ext in ("png", "svg"):
        path = os.path.join(out, f"{name}.{ext}")
        try:
            fig.savefig(path, dpi=120)
        except OSError as e:
            fail_to_write(path, e)
    plt.close(fig)


def throughput(rows, out):
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    parts = [("decode (all query lengths 1)", lambda r: num(r, "num_prefill_tokens") == 0, "tb_per_sec", 1000, "GB/s"),
             ("prefill / mixed steps", lambda r: num(r, "num_prefill_tokens") > 0, "tflops", 1, "TFLOP/s")]
    for ax, (title, keep, col, scale, unit) in zip(axes, parts):
        series = {}
        for r in rows:
            if not timed(r) or not keep(r):
                continue
            ctx = num(r, "kv_tokens") / max(num(r, "num_reqs"), 1)
            series.setdefault((r["backend"], int(num(r, "num_reqs"))), []).append((ctx, num(r, col) * scale))
        for (backend, reqs), pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{backend}, {reqs} requests")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("mean keys per request (context + new tokens)")
        ax.set_ylabel(unit)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        if series:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no timed rows", ha="center", va="center", transform=ax.transAxes)
    if not any(timed(r) for r in rows):
        print("plot.py: throughput: nothing to draw: no row was timed")
    save(fig, out, "throughput")


def roofline(rows, out):
    fig, ax = plt.subplots(figsize=(7, 5))
    bw = [num(r, "tb_per_sec") * 1e3 * 100 / num(r, "pct_peak_bw") for r in rows if timed(r) and num(r, "pct_peak_bw", -1) > 0]
    mm = [num(r, "tflops") * 100 / num(r, "pct_peak_flops") for r in rows if timed(r) and num(r, "pct_peak_flops", -1) > 0]
    points = {}
    for r in rows:
        if timed(r) and num(r, "bytes") > 0 and num(r, "flops") > 0:
            points.setdefault(r["backend"], []).append((num(r, "flops") / num(r, "bytes"), num(r, "tflops")))
    for backend, pts in sorted(points.items()):
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=backend, s=24)
    xs = [p[0] for pts in points.values() for p in pts] or [1.0]
    lo, hi = min(xs) / 2, max(xs) * 2
    if bw and mm:
        peak_bw, peak_mm = sorted(bw)[len(bw) // 2], sorted(mm)[len(mm) // 2]
        grid = [lo * (hi / lo) ** (i / 100) for i in range(101)]
        ax.plot(grid, [min(x * peak_bw / 1e3, peak_mm) for x in grid], "k--", lw=1,
                label=f"ceilings: copy {peak_bw:.0f} GB/s, matrix {peak_mm:.0f} TFLOP/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    if bw and mm:
        ax.set_title("roofline")
    else:
        # Above the axes, under the title: inside them the legend (placed where the points are
        # not, often the top left) lands on it (CPU rows never have a % of peak).
        ax.set_title("roofline", pad=16)
        ax.text(0.5, 1.01, "device ceilings unknown (no % of peak in the CSV)", ha="center", va="bottom",
                transform=ax.transAxes, fontsize=8)
    if points:
        ax.legend(fontsize=8)
    else:
        nothing_to_draw(ax, "roofline", "no timed row has its FLOPs and bytes")
    save(fig, out, "roofline")


def speedup(rows, out, baseline):
    backends = sorted({r["backend"] for r in rows if timed(r)})
    base = baseline or (backends[0] if backends else "")
    times = {(case_of(r), r["backend"]): num(r, "median_time_us") for r in rows if timed(r)}
    others = [b for b in backends if b != base]
    # The cases the baseline and at least one other backend were both timed on: a case only one
    # of them ran is a bar of nothing.
    cases = sorted({c for (c, b) in times if b == base and any((c, o) in times for o in others)}, key=natural_key)
    fig, ax = plt.subplots(figsize=(max(6, 0.5 * len(cases) + 2), 4.5))
    width = 0.8 / max(len(others), 1)
    for i, b in enumerate(others):
        vals = [times[(c, base)] / times[(c, b)] if (c, b) in times else math.nan for c in cases]
        ax.bar([k + i * width for k in range(len(cases))], vals, width, label=f"{b} over {base}")
    ax.axhline(1.0, color="k", lw=1)
    ax.set_xticks([k + width * (len(others) - 1) / 2 for k in range(len(cases))])
    ax.set_xticklabels(cases, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(f"speedup over {base} (higher is faster)")
    ax.set_title("speedup per case")
    if cases:
        ax.legend(fontsize=8)
    elif not others:
        nothing_to_draw(ax, "speedup", f"only {base or 'no backend'} was timed: nothing to compare")
    else:
        nothing_to_draw(ax, "speedup", f"no case was timed on both {base} and {', '.join(others)}")
    save(fig, out, "speedup")


def accuracy(rows, out):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    use_floor = any(num(r, "floor_rel_l2") > 0 for r in rows if checked(r))
    backends = sorted({r["backend"] for r in rows if checked(r)})
    for i, b in enumerate(backends):
        vals = [num(r, "err_over_floor") if use_floor else num(r, "rel_l2") for r in rows if checked(r) and r["backend"] == b]
        ax.scatter([i + 0.1 * ((k % 7) - 3) / 3 for k in range(len(vals))], vals, s=18, label=b)
    if use_floor:
        ax.axhline(1.0, color="grey", lw=1, ls=":", label="the floor (exact result rounded once)")
        ax.axhline(1.6, color="r", lw=1, ls="--", label="default bf16/fp16 gate (1.6 x floor)")
        ax.set_ylabel("rel_l2 / precision floor")
    else:
        ax.set_yscale("log")
        ax.set_ylabel("rel_l2")
    ax.set_xticks(range(len(backends)))
    ax.set_xticklabels(backends)
    ax.set_xlim(-0.6, len(backends) - 0.4)  # one narrow strip of points per backend
    ax.set_title("accuracy per backend (each point a checked case)")
    ax.grid(True, axis="y", alpha=0.3)
    if backends:
        ax.legend(fontsize=8)
    else:
        nothing_to_draw(ax, "accuracy", "no row was checked (pass or fail)")
    save(fig, out, "accuracy")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results")
    ap.add_argument("--out", required=True)
    ap.add_argument("--baseline", default="", help="backend the speedups are taken over (default: the first timed one)")
    a = ap.parse_args()
    rows = load(a.results)
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        fail_to_write(a.out, e)
    throughput(rows, a.out)
    roofline(rows, a.out)
    speedup(rows, a.out, a.baseline)
    accuracy(rows, a.out)
    print(f"plot.py: wrote throughput, roofline, speedup, accuracy (.png, .svg) to {a.out}")


if __name__ == "__main__":
    main()
