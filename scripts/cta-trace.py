#!/usr/bin/env python3
"""Reads a CTA timeline of the mma.sync kernel (kernels/flash_attn/cta_trace.cuh, scripts/gpu-trace --cta).

    scripts/cta-trace.py FILE
    scripts/cta-trace.py --self-test

Prints, in microseconds from the launch's first CTA start: the CTAs' span; when they start (an SM's
second CTA may start later than its first); when their main loops end (the last key tile's
products) and when they end (min / p10 / median / p90 / max); the spread of the SMs' mean main loop
ends (SMs that stream slower end later, and in a single wave nothing evens them out); the time from
a CTA's main loop end to its end (its epilogue, and for a cluster of two splits, grid z = 2, the
hand-off: split 1's end after its own main loop, split 0's after both splits' main loops, and how far
apart a pair's main loops end); and how many CTAs are done by when.
"""
import struct
import sys
from collections import defaultdict

START, MAIN_END, END, SM, POINTS = range(5)  # kernels/flash_attn/cta_trace.cuh


def read(path):
    """The trace at `path`; SystemExit with a message naming it where it is not one."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SystemExit(f"cta-trace: cannot read {path}: {e.strerror}")
    if len(data) < 16:
        raise SystemExit(f"cta-trace: {path} is not a CTA trace ({len(data)} bytes, the header alone is 16)")
    ctas, gx, gy, gz = struct.unpack_from("4i", data, 0)
    if ctas < 0 or min(gx, gy, gz) < 1 or len(data) != 16 + 8 * POINTS * ctas:
        raise SystemExit(f"cta-trace: {path} is not a CTA trace (header {ctas} CTAs, grid {gx} x {gy} x {gz}, "
                         f"{len(data)} bytes); write one with scripts/gpu-trace --cta")
    stamps = struct.unpack_from(f"{ctas * POINTS}q", data, 16)
    return (ctas, gx, gy, gz), [stamps[i * POINTS:(i + 1) * POINTS] for i in range(ctas)]


def quantiles(values):
    v = sorted(values)
    if not v:
        return "-"
    pick = lambda q: v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]
    return " / ".join(f"{x:.1f}" for x in (v[0], pick(0.1), pick(0.5), pick(0.9), v[-1]))


def summary(trace):
    (ctas, gx, gy, gz), rows = trace
    done = [r for r in rows if r[START] >= 0 and r[END] >= 0]
    if not done:
        return ["cta-trace: no CTA of the launch was stamped"]
    t0 = min(r[START] for r in done)
    us = lambda ns: (ns - t0) / 1e3
    starts = [us(r[START]) for r in done]
    mains = [us(r[MAIN_END]) for r in done if r[MAIN_END] >= 0]
    ends = [us(r[END]) for r in done]
    out = [f"grid {gx} x {gy} x {gz}: {ctas} CTAs stamped, {len(done)} complete; span {max(ends):.1f} us",
           "                     min / p10 / median / p90 / max (us from the first start)",
           f"start                {quantiles(starts)} ({sum(1 for s in starts if s > 1.0)} later than 1 us)",
           f"main loop end        {quantiles(mains)}",
           f"end                  {quantiles(ends)}"]
    by_sm = defaultdict(list)
    for r in done:
        if r[MAIN_END] >= 0:
            by_sm[r[SM]].append(us(r[MAIN_END]))
    sm_means = [sum(v) / len(v) for v in by_sm.values()]
    counts = defaultdict(int)
    for v in by_sm.values():
        counts[len(v)] += 1
    per_sm = ", ".join(f"{n} SMs with {k}" for k, n in sorted(counts.items()))
    out.append(f"SMs' mean main loop end {quantiles(sm_means)} ({len(by_sm)} SMs: {per_sm} CTAs)")
    epi = [us(r[END]) - us(r[MAIN_END]) for r in done if r[MAIN_END] >= 0]
    out.append(f"end - main loop end  {quantiles(epi)}")
    if gz == 2 and ctas == gx * gy * gz:
        half = gx * gy
        split0, split1, apart = [], [], []
        for i in range(half):
            a, b = rows[i], rows[i + half]
            if min(a[MAIN_END], b[MAIN_END], a[END], b[END]) < 0:
                continue
            both = max(a[MAIN_END], b[MAIN_END])
            split0.append((a[END] - both) / 1e3)
            split1.append((b[END] - b[MAIN_END]) / 1e3)
            apart.append(abs(a[MAIN_END] - b[MAIN_END]) / 1e3)
        out.append(f"split 0 end - both main loop ends {quantiles(split0)}")
        out.append(f"split 1 end - its main loop end   {quantiles(split1)}")
        out.append(f"a pair's main loop ends apart     {quantiles(apart)}")
    ends.sort()
    marks = [f"{int(q * 100)} % by {ends[min(len(ends) - 1, int(q * len(ends) + 0.5) - 1)]:.1f}" for q in (0.5, 0.9, 0.99, 1.0)]
    out.append("CTAs done: " + ", ".join(marks) + " us")
    return out


def self_test():
    """A synthetic launch with known times must read back as written."""
    gx, gz, rows = 4, 2, []
    for z in range(gz):
        for x in range(gx):
            start = 1000 + (1500 if x % 2 else 0)  # every other CTA starts 1.5 us late
            main = start + 80_000 + 1000 * x + 2000 * z  # split 1's main loops end 2 us after split 0's
            end = main + (700 if z else 1200 + 2000 * (1 - z))
            rows.append((start, main, end, x))  # each SM holds its pair of splits
    trace = ((gx * gz, gx, 1, gz), rows)
    text = "\n".join(summary(trace))
    assert "grid 4 x 1 x 2: 8 CTAs stamped, 8 complete" in text, text
    assert "(4 later than 1 us)" in text, text
    assert "4 SMs with 2 CTAs" in text, text
    # split 1 ends 0.7 us after its main loop; split 0's main loop ends 2 us before split 1's and it
    # ends 3.2 us after its own, i.e. 1.2 us after both.
    assert "split 1 end - its main loop end   0.7 / 0.7 / 0.7 / 0.7 / 0.7" in text, text
    assert "split 0 end - both main loop ends 1.2 / 1.2 / 1.2 / 1.2 / 1.2" in text, text
    assert "a pair's main loop ends apart     2.0 / 2.0 / 2.0 / 2.0 / 2.0" in text, text
    assert "100 % by 87.7 us" in text, text  # CTA x = 3, split 0: 1.5 + 80 + 3 + 3.2 (from the first start)
    print("cta-trace self-test: ok")
    return 0


def main():
    args = sys.argv[1:]
    if args == ["--self-test"]:
        return self_test()
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    for line in summary(read(args[0])):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
