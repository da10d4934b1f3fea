#!/usr/bin/env python3
"""Where the sm_90a kernel's CTAs spend their time, item by item, from a trace that scripts/gpu-trace
writes (a build with -DATTN_SM90_TRACE; file format: kernels/flash_attn/sm90_trace.cuh).

    scripts/sm90-trace.py FILE.trace [--by-tiles] [--by-round] [--cta N]
    scripts/sm90-trace.py --self-test

Prints the launch's CTA spans, then per consumer the mean of each phase of an item in microseconds
(the SM clock is calibrated against the global timer over each CTA's span):
  q      item start -> its rows of Q landed
  turn   -> it may issue its first Q K^T (its turn; on the plain schedule its first stage full)
  s      -> the first S landed
  tiles  -> the last P V completed
  (turn, s and tiles: not on the fp8 tensor-core ping-pong, nor for an idle decode consumer)
  epi    -> the epilogue's stores issued, in three parts where stamped:
    fields   -> the epilogue has the item's fields again
    rows     -> the rows' ends are done and their O staged
    stores   -> the stores issued
  body   Q landed -> the epilogue's stores issued (where turn, s and tiles are not stamped)
and the share of the CTAs' time outside the key tiles' products (q + turn + s + epi; not shown
where only body is known), and of the time that every consumer spends there at once (then only a
first Q K^T can keep the tensor cores busy). --by-tiles splits the phases by the item's key-tile
count, with the mean of tiles / key tiles; --by-round lists each round (every CTA's r-th item) by
the items' key-tile counts: how many, their mean start from the CTA's start and mean length (consumer
0, from the item's start to its stores), and the key tiles per us they stream together (a mixed
step's decode items against its prefill items, say); --cta N lists CTA N's items, each consumer's
phases side by side, from the CTA's start. Where the CTAs' item and key-tile counts differ, each CTA's span
is also fitted to them (the planner's cost model of fixed rounds).
"""
import struct
import sys
from collections import defaultdict

PRODUCER_ITEM, CONSUMER0, CONSUMER_POINTS = 1, 4, 8  # kernels/flash_attn/sm90_trace.cuh
ITEM, Q, TURN, FIRST_S, LAST_PV, END, EPI_FIELDS, EPI_ROWS = range(8)
PHASES = ("q", "turn", "s", "tiles", "epi", "fields", "rows", "stores", "body")


def read(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SystemExit(f"sm90-trace: cannot read {path}: {e.strerror}")
    if len(data) >= 16:
        ctas, rounds, points, grid = struct.unpack_from("<4i", data, 0)
        n = ctas * rounds * points
        if min(ctas, rounds, points, grid) > 0 and len(data) == 16 + 8 * (n + 4 * ctas):
            stamps = struct.unpack_from(f"<{n}q", data, 16)
            cta = struct.unpack_from(f"<{ctas * 4}q", data, 16 + 8 * n)
            return ctas, rounds, points, grid, stamps, cta
    raise SystemExit(f"sm90-trace: {path} is not a whole trace ({len(data)} bytes): write it again with scripts/gpu-trace")


def items(trace):
    """(cta, round, tiles, consumer, {phase: us}) per consumer item, and per-CTA (span us, GHz)."""
    ctas, rounds, points, grid, stamps, cta = trace
    out, spans = [], []
    for c in range(min(ctas, grid)):
        t0, k0, t1, k1 = cta[4 * c:4 * c + 4]
        if t1 <= t0 or k1 <= k0:
            continue
        ghz = (k1 - k0) / (t1 - t0)
        spans.append(((t1 - t0) / 1e3, ghz, t0, t1))
        us = lambda v: (v - k0) / ghz / 1e3
        for r in range(rounds):
            base = (c * rounds + r) * points
            tiles = stamps[base]
            for wg in range((points - CONSUMER0) // CONSUMER_POINTS):
                p = stamps[base + CONSUMER0 + CONSUMER_POINTS * wg:base + CONSUMER0 + CONSUMER_POINTS * (wg + 1)]
                if p[ITEM] < 0 or p[END] < 0:
                    continue
                ph = {}
                if p[Q] >= 0:
                    ph["q"] = us(p[Q]) - us(p[ITEM])
                if min(p[Q], p[TURN], p[FIRST_S], p[LAST_PV]) >= 0:
                    ph["turn"] = us(p[TURN]) - us(p[Q])
                    ph["s"] = us(p[FIRST_S]) - us(p[TURN])
                    ph["tiles"] = us(p[LAST_PV]) - us(p[FIRST_S])
                    ph["epi"] = us(p[END]) - us(p[LAST_PV])
                    if min(p[EPI_FIELDS], p[EPI_ROWS]) >= 0:
                        ph["fields"] = us(p[EPI_FIELDS]) - us(p[LAST_PV])
                        ph["rows"] = us(p[EPI_ROWS]) - us(p[EPI_FIELDS])
                        ph["stores"] = us(p[END]) - us(p[EPI_ROWS])
                elif p[Q] >= 0:
                    ph["body"] = us(p[END]) - us(p[Q])
                ph["item"] = us(p[END]) - us(p[ITEM])
                # Outside the key tiles, from the CTA's start: [start, first S) and [last P V, end).
                if "tiles" in ph:
                    ph["_out"] = [(us(p[ITEM]), us(p[FIRST_S])), (us(p[LAST_PV]), us(p[END]))]
                ph["_at"] = us(p[ITEM])
                out.append((c, r, tiles, wg, ph))
    return out, spans


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def all_outside(rows, spans):
    """Share of the traced CTAs' time in which every consumer is outside its key tiles (None
    where a consumer's items lack the overlapped schedule's stamps)."""
    per = defaultdict(lambda: defaultdict(list))
    for c, _, _, wg, ph in rows:
        if "_out" not in ph:
            return None
        per[c][wg].extend(ph["_out"])
    both = 0.0
    for c, by_wg in per.items():
        sets = list(by_wg.values())
        if len(sets) < 2:
            return None
        common = sets[0]
        for other in sets[1:]:
            common = [(max(x[0], y[0]), min(x[1], y[1])) for x in common for y in other if min(x[1], y[1]) > max(x[0], y[0])]
        both += sum(hi - lo for lo, hi in common)
    return both / sum(s[0] for s in spans)


def cta_fit(trace):
    """Each traced CTA's span fitted to its items and their key tiles by least squares, span = a x
    items + b x key tiles + c: the cost model behind the planner's balanced fixed rounds
    (balance_fixed_rounds in lib/backends/flash_attn/flash_attn_plan.cpp, whose item cost in key
    tiles is a / b). Returns (a, b, c, r, spans) or None where the CTAs' counts leave the fit
    undetermined (every CTA alike, or fewer than four)."""
    ctas, rounds, points, grid, stamps, cta = trace
    rows = []
    for c in range(min(ctas, grid)):
        t0, _, t1, _ = cta[4 * c:4 * c + 4]
        if t1 <= t0:
            continue
        tiles = [stamps[(c * rounds + r) * points] for r in range(rounds)]
        tiles = [t for t in tiles if t >= 0]
        rows.append((float(len(tiles)), float(sum(tiles)), 1.0, (t1 - t0) / 1e3))
    if len(rows) < 4:
        return None
    # Normal equations (3 x 3), solved by Gaussian elimination with partial pivoting.
    m = [[sum(r[i] * r[j] for r in rows) for j in range(3)] + [sum(r[i] * r[3] for r in rows)] for i in range(3)]
    for col in range(3):
        piv = max(range(col, 3), key=lambda i: abs(m[i][col]))
        if abs(m[piv][col]) < 1e-9 * max(1.0, abs(m[0][0])):
            return None
        m[col], m[piv] = m[piv], m[col]
        for i in range(3):
            if i != col:
                f = m[i][col] / m[col][col]
                m[i] = [x - f * y for x, y in zip(m[i], m[col])]
    a, b, c = (m[i][3] / m[i][i] for i in range(3))
    fit = [a * r[0] + b * r[1] + c for r in rows]
    span = [r[3] for r in rows]
    mf, ms = mean(fit), mean(span)
    cov = sum((x - mf) * (y - ms) for x, y in zip(fit, span))
    var = (sum((x - mf) ** 2 for x in fit) * sum((y - ms) ** 2 for y in span)) ** 0.5
    return a, b, c, (cov / var if var > 0 else float("nan")), span


def summary(trace, by_tiles=False):
    rows, spans = items(trace)
    lines = []
    if not spans:
        return ["no CTA of the launch was traced"]
    span = [s[0] for s in spans]
    starts, ends = [s[2] for s in spans], [s[3] for s in spans]
    lines.append(f"CTAs {len(spans)}: span {min(span):.1f} / {mean(span):.1f} / {max(span):.1f} us (min / mean / max), "
                 f"start skew {(max(starts) - min(starts)) / 1e3:.1f} us, end skew {(max(ends) - min(ends)) / 1e3:.1f} us, "
                 f"SM clock {mean([s[1] for s in spans]):.3f} GHz")
    fit = cta_fit(trace)
    if fit is not None:
        a, b, c, r, sp = fit
        lines.append(f"CTA spans fitted to their items and key tiles: {a:.2f} us per item + {b:.2f} us per key tile "
                     f"+ {c:.1f} us (r = {r:.2f}; an item costs {a / b:.2f} key tiles); the longest CTA ends "
                     f"{(max(sp) / mean(sp) - 1) * 100:.1f} % past the mean")
    shared = all_outside(rows, spans)
    if shared is not None:
        lines.append(f"every consumer outside its key tiles at once: {shared * 100:.1f} % of the CTAs' time")
    for wg in sorted({r[3] for r in rows}):
        mine = [r for r in rows if r[3] == wg]
        per_cta = defaultdict(int)
        for r in mine:
            per_cta[r[0]] += 1
        cols = " ".join(f"{k} {mean([r[4][k] for r in mine if k in r[4]]):.3f}" for k in PHASES if any(k in r[4] for r in mine))
        share = ""
        if all("tiles" in r[4] for r in mine):
            outside = sum(sum(v for k, v in r[4].items() if k in ("q", "turn", "s", "epi")) for r in mine)
            share = f"; outside the key tiles {outside / sum(span) * 100:.1f} % of the CTAs' time"
        lines.append(f"consumer {wg}: {len(mine)} items ({min(per_cta.values())}-{max(per_cta.values())} per CTA); "
                     f"mean us: {cols}{share}")
        if by_tiles:
            groups = defaultdict(list)
            for r in mine:
                groups[r[2]].append(r[4])
            for n in sorted(groups):
                g = groups[n]
                cols = " ".join(f"{k} {mean([x[k] for x in g if k in x]):.3f}" for k in PHASES if any(k in x for x in g))
                if n > 0 and any("tiles" in x for x in g):
                    cols += f"; tiles / key tiles {mean([x['tiles'] for x in g if 'tiles' in x]) / n:.3f}"
                lines.append(f"  {n:4d} key tiles x {len(g):5d}: {cols}")
    return lines


def round_listing(trace):
    """Per round (each CTA's r-th item), per key-tile count: items, mean start and length (us, the
    first consumer that stamped the item), and their key tiles per us together (sum of n / length)."""
    rows, _ = items(trace)
    first = {}
    for c, r, tiles, wg, ph in rows:
        if (c, r) not in first or wg < first[(c, r)][0]:
            first[(c, r)] = (wg, tiles, ph)
    by_round = defaultdict(lambda: defaultdict(list))
    for (c, r), (_, tiles, ph) in first.items():
        by_round[r][tiles].append(ph)
    lines = ["rounds: key tiles x items, from (mean us after the CTA's start), each (mean us), key tiles per us together"]
    for r in sorted(by_round):
        cols = []
        for n in sorted(by_round[r], reverse=True):
            g = by_round[r][n]
            rate = sum(n / x["item"] for x in g if x["item"] > 0)
            cols.append(f"{n} x {len(g)} from {mean([x['_at'] for x in g]):.1f}, {mean([x['item'] for x in g]):.1f} each, {rate:.1f}/us")
        lines.append(f"  {r:3d}: " + "; ".join(cols))
    return lines


def cta_listing(trace, cta):
    """CTA `cta`'s items: per round, each consumer's start (us from the CTA's start) and phases."""
    rows, _ = items(trace)
    mine = sorted((r for r in rows if r[0] == cta), key=lambda r: (r[1], r[3]))
    if not mine:
        return [f"CTA {cta} was not traced"]
    lines = [f"CTA {cta}: round, key tiles, then per consumer its start and phases (us)"]
    for rnd in sorted({r[1] for r in mine}):
        cols = []
        for r in (x for x in mine if x[1] == rnd):
            ph = r[4]
            cols.append(f"c{r[3]} @{ph['_at']:8.2f} " + " ".join(f"{k} {ph[k]:.2f}" for k in PHASES if k in ph))
        tiles = next(x[2] for x in mine if x[1] == rnd)
        lines.append(f"  {rnd:3d} {tiles:4d}  " + " | ".join(cols))
    return lines


def self_test():
    """A synthetic trace with known phases (1.5 GHz SM clock) must read back as written."""
    ctas, rounds, points, grid = 4, 8, CONSUMER0 + 2 * CONSUMER_POINTS, 3
    stamps = [-1] * (ctas * rounds * points)
    cta = [0] * (ctas * 4)
    ghz, phases = 1.5, {"q": 1.25, "turn": 0.25, "s": 0.5, "tiles": 3.0, "fields": 0.5, "rows": 1.0, "stores": 0.5}
    for c in range(grid):
        t = 1000.0  # us on the SM clock's start
        cta[4 * c:4 * c + 2] = [10_000_000, int(t * 1e3 * ghz)]
        for r in range(3):
            base = (c * rounds + r) * points
            stamps[base] = 4
            stamps[base + PRODUCER_ITEM] = int(t * 1e3 * ghz)
            for wg in range(2):
                clock, o = t, base + CONSUMER0 + CONSUMER_POINTS * wg
                stamps[o + ITEM] = int(clock * 1e3 * ghz)
                for point, name in ((Q, "q"), (TURN, "turn"), (FIRST_S, "s"), (LAST_PV, "tiles"), (EPI_FIELDS, "fields"),
                                    (EPI_ROWS, "rows"), (END, "stores")):
                    clock += phases[name]
                    stamps[o + point] = int(clock * 1e3 * ghz)
            t = clock
        cta[4 * c + 2:4 * c + 4] = [10_000_000 + int((t - 1000.0) * 1e3), int(t * 1e3 * ghz)]
    rows, spans = items((ctas, rounds, points, grid, stamps, cta))
    assert len(spans) == grid and len(rows) == grid * 3 * 2, (len(spans), len(rows))
    for name, want in list(phases.items()) + [("epi", 2.0)]:
        got = mean([r[4][name] for r in rows])
        assert abs(got - want) < 1e-3, (name, got, want)
    assert abs(mean([s[1] for s in spans]) - ghz) < 1e-6
    text = "\n".join(summary((ctas, rounds, points, grid, stamps, cta), by_tiles=True))
    assert "outside the key tiles 57.1 %" in text, text  # (1.25+0.25+0.5+2)/7 per consumer
    # Both consumers run the same phases at the same times: all of it at once.
    assert "outside its key tiles at once: 57.1 %" in text, text
    listing = cta_listing((ctas, rounds, points, grid, stamps, cta), 1)
    assert len(listing) == 4 and "c1 @" in listing[1], listing
    # Three rounds of one 4-tile item per CTA, 7 us each, back to back: 3 x 4 / 7 key tiles per us.
    by_round = round_listing((ctas, rounds, points, grid, stamps, cta))
    assert by_round[1:] == ["    0: 4 x 3 from 0.0, 7.0 each, 1.7/us", "    1: 4 x 3 from 7.0, 7.0 each, 1.7/us",
                            "    2: 4 x 3 from 14.0, 7.0 each, 1.7/us"], by_round
    # CTAs of 2-5 items of 1-4 key tiles, spans 4.5 us per item + 1.5 us per key tile + 2 us: the fit
    # gives the model back (the spans' clock: 1.5 GHz, as above).
    stamps2 = [-1] * (8 * rounds * points)
    cta2 = [0] * (8 * 4)
    for c in range(8):
        n, t = 2 + c % 4, 1 + (3 * c) % 4
        for r in range(n):
            stamps2[(c * rounds + r) * points] = t
        span_us = 4.5 * n + 1.5 * n * t + 2.0
        cta2[4 * c:4 * c + 4] = [1000, 0, 1000 + int(span_us * 1e3), int(span_us * 1e3 * ghz)]
    a, b, c, r, _ = cta_fit((8, rounds, points, 8, stamps2, cta2))
    assert abs(a - 4.5) < 1e-3 and abs(b - 1.5) < 1e-3 and abs(c - 2.0) < 1e-2 and r > 0.999, (a, b, c, r)
    assert cta_fit((ctas, rounds, points, grid, stamps, cta)) is None  # every CTA alike: undetermined
    print("sm90-trace self-test: ok")
    return 0


def main():
    args = sys.argv[1:]
    if args == ["--self-test"]:
        return self_test()
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    cta = None
    if "--cta" in args:
        i = args.index("--cta")
        if i + 1 >= len(args) or not args[i + 1].isdigit():
            print("sm90-trace: --cta takes a CTA index (0, 1, ...)", file=sys.stderr)
            return 2
        cta = int(args[i + 1])
    trace = read(args[0])
    for line in summary(trace, by_tiles="--by-tiles" in args):
        print(line)
    if "--by-round" in args:
        for line in round_listing(trace):
            print(line)
    if cta is not None:
        for line in cta_listing(trace, cta):
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
