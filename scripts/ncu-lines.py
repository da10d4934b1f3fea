#!/usr/bin/env python3
"""Warp-stall samples per CUDA source line from the source page that scripts/gpu-ncu writes.

    scripts/ncu-lines.py NAME-source.csv [--top N]

The page (ncu --page source --csv --print-source cuda,sass) lists each source file's lines with
their samples summed over the line's SASS; lines of an inlined helper (an mbarrier wait, say) sum
every call site. Prints the lines with the most samples: share of all samples, executed warp
instructions, and the three largest stall reasons.
"""
import csv
import sys


def main() -> int:
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    top = 40
    if "--top" in args:
        i = args.index("--top")
        top = int(args[i + 1])
        del args[i:i + 2]
    rows = []
    header = None
    path = "?"
    with open(args[0], newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if rec[0] == "File Path":
                path = rec[1]
                continue
            if rec[0] == "Function Name":
                continue
            if rec[0] == "Line No":
                header = rec
                continue
            if header is None or not rec[0]:
                continue  # a SASS row: its line's row already sums it
            # The metrics are the last columns: a source text holding quotes can split into more.
            row = dict(zip(header[4:], rec[len(rec) - (len(header) - 4):]))
            rows.append((path, int(rec[0]), rec[1].strip(), row))

    def num(row, key):
        try:
            return float(row.get(key, "0").replace(",", ""))
        except ValueError:
            return 0.0

    total = sum(num(r, "Warp Stall Sampling (All Samples)") for _, _, _, r in rows) or 1.0
    stalls = [k for k in (header or []) if k.startswith("stall_") and "(Not Issued)" not in k]
    rows.sort(key=lambda x: -num(x[3], "Warp Stall Sampling (All Samples)"))
    print(f"{'share':>6} {'samples':>8} {'warp insts':>11}  location / source / top stalls")
    for path, line, src, row in rows[:top]:
        s = num(row, "Warp Stall Sampling (All Samples)")
        reasons = sorted(((num(row, k), k[6:]) for k in stalls), reverse=True)[:3]
        why = ", ".join(f"{k} {v / s * 100:.0f}%" for v, k in reasons if v > 0) if s else ""
        print(f"{s / total * 100:5.1f}% {s:8.0f} {num(row, 'Instructions Executed'):11.0f}  "
              f"{path.split('/')[-1]}:{line} {src[:70]}\n{'':29}{why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
