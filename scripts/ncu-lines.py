#!/usr/bin/env python3
"""Warp-stall samples per CUDA source line from the source page that scripts/gpu-ncu writes.

    scripts/ncu-lines.py NAME-source.csv [--top N]
    scripts/ncu-lines.py NAME-source.csv --span FILE:FIRST-LAST [--per N]
    scripts/ncu-lines.py --self-test

The page (ncu --page source --csv --print-source cuda,sass) lists each source file's lines with
their samples summed over the line's SASS; lines of an inlined helper (an mbarrier wait, say) sum
every call site. Prints the lines with the most samples: share of all samples, executed warp
instructions, and the three largest stall reasons.

--span: the SASS from the lowest to the highest address that lines FIRST..LAST of FILE (its base
name, e.g. flash_fwd_sm90.cuh:1290-1360) compiled to, inlined helpers included (each instruction
once): how many instructions it holds, how many warp instructions ran there (divided by N, e.g. the
launch's consumer warps x work items, for a count per warp and item), its share of the samples, and
the source lines that ran most there. What one phase of a kernel costs, read from one profile.
Name lines of one place in the code: a helper inlined at several call sites (tile_keys, say) spans
everything between them; its own lines' counts (the default report) are the sum over its sites.
"""
import csv
import os
import sys


def num(row, key):
    """A metric of a page row as a number (0 where it is empty or "-")."""
    try:
        return float(row.get(key, "0").replace(",", ""))
    except ValueError:
        return 0.0


def page_rows(csv_path):
    """The source page's rows in order: (file path, line, source text, None, metrics) for a source
    line (its metrics summed over its SASS) and (file path, line, SASS text, address, metrics) for
    each SASS instruction listed under that line."""
    header = None
    path = "?"
    line = 0
    src = ""
    with open(csv_path, newline="") as f:
        for rec in csv.reader(f):
            if not rec or rec[0] == "Function Name":
                continue
            if rec[0] == "File Path":
                path = rec[1]
                continue
            if rec[0] == "Line No":
                header = rec
                continue
            if header is None:
                continue
            # The metrics are the last columns: a source text holding quotes can split into more.
            row = dict(zip(header[4:], rec[len(rec) - (len(header) - 4):]))
            if rec[0]:
                line, src = int(rec[0]), rec[1].strip()
                yield path, line, src, None, row
                continue
            try:
                addr = int(rec[2], 16)
            except ValueError:
                continue  # "..." rows
            yield path, line, rec[3].strip(), addr, row


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
    span = None
    per = 1.0
    if "--span" in args:
        i = args.index("--span")
        fname, _, lines = args[i + 1].rpartition(":") if i + 1 < len(args) else ("", "", "")
        first, _, last = lines.partition("-")
        if not fname or not first.isdigit() or not (last or first).isdigit():
            print("ncu-lines: --span takes FILE:FIRST-LAST (e.g. flash_fwd_sm90.cuh:1290-1360)", file=sys.stderr)
            return 2
        span = (fname, int(first), int(last or first))
        del args[i:i + 2]
    if "--per" in args:
        i = args.index("--per")
        per = float(args[i + 1])
        del args[i:i + 2]
    if args == ["--self-test"]:
        return self_test()
    if len(args) != 1 or not os.path.isfile(args[0]):
        print(f"ncu-lines: expected one source page (NAME-source.csv from scripts/gpu-ncu), got {args}", file=sys.stderr)
        return 2
    if span:
        return print_span(args[0], span, per)
    rows = [(path, line, src, row) for path, line, src, addr, row in page_rows(args[0]) if addr is None]
    header_keys = rows[0][3].keys() if rows else []
    total = sum(num(r, "Warp Stall Sampling (All Samples)") for _, _, _, r in rows) or 1.0
    stalls = [k for k in header_keys if k.startswith("stall_") and "(Not Issued)" not in k]
    rows.sort(key=lambda x: -num(x[3], "Warp Stall Sampling (All Samples)"))
    print(f"{'share':>6} {'samples':>8} {'warp insts':>11}  location / source / top stalls")
    for path, line, src, row in rows[:top]:
        s = num(row, "Warp Stall Sampling (All Samples)")
        reasons = sorted(((num(row, k), k[6:]) for k in stalls), reverse=True)[:3]
        why = ", ".join(f"{k} {v / s * 100:.0f}%" for v, k in reasons if v > 0) if s else ""
        print(f"{s / total * 100:5.1f}% {s:8.0f} {num(row, 'Instructions Executed'):11.0f}  "
              f"{path.split('/')[-1]}:{line} {src[:70]}\n{'':29}{why}")
    return 0


def print_span(csv_path, span, per):
    """The --span report (see the module's doc), printed; 1 when the span compiled to nothing."""
    lines = span_report(csv_path, span, per)
    if lines is None:
        print(f"no SASS of {span[0]}:{span[1]}-{span[2]} in {csv_path}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def span_report(csv_path, span, per):
    """The --span report's lines, or None when no SASS belongs to the span's lines."""
    sass = {}  # address -> [executed, samples, {source: executed}]
    for path, line, _, addr, row in page_rows(csv_path):
        if addr is None:
            continue
        entry = sass.setdefault(addr, [num(row, "Instructions Executed"), num(row, "Warp Stall Sampling (All Samples)"), {}])
        entry[2][(path.split("/")[-1], line)] = entry[0]
    fname, first, last = span
    inside = [a for a, e in sass.items() if any(p == fname and first <= ln <= last for p, ln in e[2])]
    if not inside:
        return None
    lo, hi = min(inside), max(inside)
    total = sum(e[1] for e in sass.values()) or 1.0
    region = {a: e for a, e in sass.items() if lo <= a <= hi}
    executed = sum(e[0] for e in region.values())
    samples = sum(e[1] for e in region.values())
    out = [f"{fname}:{first}-{last}: {len(region)} instructions, {executed / per:.0f} warp instructions run"
           f"{f' per {per:g}' if per != 1.0 else ''}, {samples:.0f} samples ({samples / total * 100:.1f} % of all)"]
    by_source = {}
    for e in region.values():
        # an inlined instruction is listed under each of its source lines: credit the innermost (the
        # helper's) once, or the span's own line where the span's file holds it
        own = [k for k in e[2] if k[0] == fname]
        key = own[0] if own else next(iter(e[2]))
        by_source[key] = by_source.get(key, 0.0) + e[0]
    for (p, ln), n in sorted(by_source.items(), key=lambda x: -x[1])[:12]:
        out.append(f"  {n / per:9.0f}  {p}:{ln}")
    return out


def self_test():
    """A synthetic source page: the span counts each instruction once, helpers inlined in it too."""
    import tempfile
    head = ["Line No", "Source", "Address", "Source", "Warp Stall Sampling (All Samples)", "Instructions Executed"]

    def page(rows):
        text = []
        for r in rows:
            text.append(",".join(f'"{c}"' for c in r))
        return "\n".join(text) + "\n"

    # kernel.cuh lines 10-12 at 0x100-0x130 (0x110 is the helper's, listed under both files), line 20
    # at 0x200; the helper's second call site, outside the span, at 0x300.
    rows = [
        ["File Path", "/src/kernel.cuh"], ["Function Name", "k"], head,
        ["10", "a();", "-", "-", "5", "200"], ["", "", "0x100", "FADD", "5", "200"],
        ["11", "helper();", "-", "-", "7", "400"], ["", "", "0x110", "MUFU.EX2", "7", "400"],
        ["12", "b();", "-", "-", "3", "600"], ["", "", "0x120", "FMUL", "1", "200"],
        ["", "", "0x130", "STS", "2", "400"],
        ["20", "c();", "-", "-", "85", "1000"], ["", "", "0x200", "BAR", "85", "1000"],
        ["File Path", "/src/helper.cuh"], ["Function Name", "k"], head,
        ["3", "ex2", "-", "-", "7", "400"], ["", "", "0x110", "MUFU.EX2", "7", "400"],
        ["", "", "0x300", "MUFU.EX2", "0", "0"],
    ]
    fd, path = tempfile.mkstemp(suffix=".csv")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(page(rows))
        text = "\n".join(span_report(path, ("kernel.cuh", 10, 12), 200.0))
        assert text.startswith("kernel.cuh:10-12: 4 instructions, 6 warp instructions run per 200, "
                               "15 samples (15.0 % of all)"), text
        assert "        3  kernel.cuh:12" in text and "        2  kernel.cuh:11" in text, text
        assert span_report(path, ("kernel.cuh", 30, 40), 1.0) is None
    finally:
        os.unlink(path)
    print("ncu-lines self-test: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
