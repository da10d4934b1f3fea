#!/usr/bin/env python3
"""Closing table of scripts/gpu-check: attn-bench's timings next to the torch peers.

Usage: gpu-summary.py BENCH.csv [PEERS.csv] [MICRO.json]
       gpu-summary.py --self-test
BENCH.csv is attn-bench's results CSV with a leading `case` column (decode, prefill, mixed,
cascade_on, cascade_off) added by gpu-check. The peer figure of a case is the best torch
result for the same shape: GB/s for decode-like cases, TFLOP/s for prefill. "read floor" is the
row's pct_read_floor: a bare streaming read of its bytes as a share of its time. Last, the speed
targets of issues 10 (FLASH_ATTN) and 9 (the FLASHMLA decode kernel), each with its ratio, taken
from the rows of this one run, and whether it is met.
"""
import csv
import json
import sys

# case -> (peer case, batch, q_len, kv_len, metric[, q_heads, kv_heads, head_dim]); the heads
# default to llama3-8b's (32 q / 8 kv heads, hd 128)
PEER_OF = {
    "decode": ("decode", 64, 1, 4096, "gbps"),
    "decode_graph": ("decode", 64, 1, 4096, "gbps"),
    "prefill": ("prefill_causal", 2, 4096, 4096, "tflops"),
    # the peers read a bf16 cache: the ratio says how the fp8 cache compares with their bf16 rate
    "prefill_fp8": ("prefill_causal", 2, 4096, 4096, "tflops"),
    "prefill_fp8q": ("prefill_causal", 2, 4096, 4096, "tflops"),
    "prefill_fp8q_attn": ("prefill_causal", 2, 4096, 4096, "tflops"),
    "prefill_1k": ("prefill_causal", 8, 1024, 1024, "tflops"),
    "prefill_attn": ("prefill_causal", 2, 4096, 4096, "tflops"),
    "prefill_1k_attn": ("prefill_causal", 8, 1024, 1024, "tflops"),
    "prefill_8k": ("prefill_causal", 1, 8192, 8192, "tflops"),
    "prefill_16k": ("prefill_causal", 1, 16384, 16384, "tflops"),
    "prefill_hd64": ("prefill_causal", 2, 4096, 4096, "tflops", 32, 32, 64),
    "prefill_hd256": ("prefill_causal", 2, 4096, 4096, "tflops", 16, 16, 256),
}


def num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def peer_figure(peers, case, which):
    """The figure of torch peer `which` (flash = FA2, cudnn) on the same shape, and its metric."""
    if case not in PEER_OF:
        return None, None
    pcase, b, q, kv, metric, hq, hk, d = (PEER_OF[case] + (32, 8, 128))[:8]
    for p in peers:
        if (p.get("case") == pcase and p.get("peer") == "torch_sdpa_" + which and num(p.get("batch")) == b
                and num(p.get("q_len")) == q and num(p.get("kv_len")) == kv and num(p.get("q_heads")) == hq
                and num(p.get("kv_heads")) == hk and num(p.get("head_dim")) == d and num(p.get(metric))):
            return num(p[metric]), metric
    return None, metric


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    try:
        with open(sys.argv[1], newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        sys.exit(f"gpu-summary: cannot read the benchmark rows {sys.argv[1]}: {e.strerror}")
    peers = []
    if len(sys.argv) > 2:
        try:
            with open(sys.argv[2], newline="") as f:
                peers = list(csv.DictReader(f))
        except OSError:
            pass
    out = [("backend", "case", "status", "median us", "TFLOP/s", "GB/s", "read floor", "FA2 peer", "x FA2", "cuDNN peer",
            "x cuDNN")]
    for r in rows:
        med, tfl = num(r.get("median_time_us")), num(r.get("tflops"))
        tbs = num(r.get("tb_per_sec"))
        gbs = tbs * 1000 if tbs is not None else None
        cells = []
        for which in ("flash", "cudnn"):
            pv, metric = peer_figure(peers, r.get("case", ""), which)
            mine = gbs if metric == "gbps" else tfl
            cells.append(f"{pv:.0f}" if pv else "-")
            cells.append(f"{mine / pv:.2f}" if pv and mine else "-")
        floor = num(r.get("pct_read_floor"))  # the bare read of the row's bytes / the row's time
        out.append((r.get("backend", "?"), r.get("case", "?"), r.get("status", "?"),
                    f"{med:.1f}" if med else "-", f"{tfl:.1f}" if tfl else "-", f"{gbs:.0f}" if gbs else "-",
                    f"{floor:.0f}%" if floor is not None and floor > 0 else "-", *cells))
    if len(sys.argv) > 3:
        try:
            with open(sys.argv[3]) as f:
                micro = json.load(f)
            for bm in micro.get("benchmarks", []):
                if bm.get("error_occurred"):
                    out.append(("micro", bm["name"], "skipped", "-", "-", "-", "-",
                                bm.get("error_message", "")[:40], "-", "-", "-"))
                    continue
                t = bm.get("real_time", 0) * {"ns": 1e-3, "us": 1, "ms": 1e3}.get(bm.get("time_unit", "us"), 1)
                tf = bm.get("TFLOP/s")
                out.append(("micro", bm["name"], "ok", f"{t:.1f}", f"{tf:.1f}" if tf else "-",
                            f"{bm.get('GB/s', 0):.0f}", "-", "-", "-", "-", "-"))
        except (OSError, ValueError):
            pass
    print_table(out)
    micro = None
    if len(sys.argv) > 3:
        mla_table(peers, sys.argv[3])
        try:
            with open(sys.argv[3]) as f:
                micro = json.load(f)
        except (OSError, ValueError):
            micro = None
    lines = targets(rows, peers, micro)
    if len(lines) > 1:
        print()
        print_table(lines)
    fit = item_fit(rows, peers)
    if len(fit) > 1:
        print()
        print_table(fit)


# Issue 10's targets on FLASH_ATTN's rows: (label, kind, cases, bound). Kinds: "cudnn" TFLOP/s over
# the cuDNN peer's; "copy" the share of the copy bandwidth (pct_peak_bw); "time_vs" the case's time
# over the second case's (at most the bound); "tflops_vs" its TFLOP/s over the second case's; "parts"
# the case's time over the sum of the other two cases' times (at most the bound).
TARGETS_10 = [
    ("prefill 2 x 4k hd128 / cuDNN", "cudnn", ("prefill",), 1.0),
    ("prefill 1 x 8k / cuDNN", "cudnn", ("prefill_8k",), 1.0),
    ("prefill 1 x 16k / cuDNN", "cudnn", ("prefill_16k",), 1.0),
    ("prefill 8 x 1k / cuDNN", "cudnn", ("prefill_1k",), 0.9),
    ("prefill 2 x 4k hd64 32/32 / cuDNN", "cudnn", ("prefill_hd64",), 0.9),
    ("prefill 2 x 4k hd256 16/16 / cuDNN", "cudnn", ("prefill_hd256",), 0.9),
    ("decode 64 x 4k / copy", "copy", ("decode",), 0.95),
    ("decode 128 x 2k / copy", "copy", ("decode_128x2k",), 0.95),
    ("decode 16 x 32k / copy", "copy", ("decode_16x32k",), 0.95),
    ("decode 256 x 1k 64q/8kv / copy", "copy", ("decode_gqa8",), 0.95),
    ("fp8 decode 64 x 4k time / bf16", "time_vs", ("decode_fp8", "decode"), 0.55),
    ("fp8 prefill 2 x 4k (quantized Q) / bf16 TFLOP/s", "tflops_vs", ("prefill_fp8q", "prefill"), 1.0),
    ("2-token decode 16 x 2 @ 4k / copy", "copy", ("decode_2tok",), 0.9),
    ("mixed step / its parts apart", "parts", ("mixed", "mixed_decodes", "mixed_prefills"), 0.9),
]
# The same figures with the attention alone timed (`--timed attention`: no cache write in the
# samples, as the torch peers), reported beside the targets, which the issue set on the step's rows.
ATTENTION_ALONE = [
    ("prefill 2 x 4k hd128 / cuDNN, attention alone", "cudnn", ("prefill_attn",), 1.0),
    ("prefill 8 x 1k / cuDNN, attention alone", "cudnn", ("prefill_1k_attn",), 0.9),
    ("fp8 prefill 2 x 4k (quantized Q) / bf16 TFLOP/s, attention alone", "tflops_vs", ("prefill_fp8q_attn", "prefill_attn"),
     1.0),
    ("decode 256 x 1k 64q/8kv / copy, attention alone", "copy", ("decode_gqa8_attn",), 0.95),
    ("2-token decode 16 x 2 @ 4k / copy, attention alone", "copy", ("decode_2tok_attn",), 0.9),
    ("mixed step / its parts apart, attention alone", "parts", ("mixed_attn", "mixed_decodes_attn", "mixed_prefills_attn"),
     0.9),
]


def targets(rows, peers, micro):
    """The issue-target table: (target, figure, bound, met) rows, FLASH_ATTN's for issue 10 and the
    FLASHMLA kernel's for issue 9; a target whose rows are missing from this run is left out."""
    fa = {r.get("case"): r for r in rows if r.get("backend") == "flash_attn" and r.get("status") == "pass"}
    out = [("issue target", "figure", "bound", "")]

    def row(label, value, bound, at_most=False, reported=False):
        met = value <= bound if at_most else value >= bound
        state = ("reported: " if reported else "") + ("met" if met else "missed")
        out.append((label, f"{value:.3f}", ("<= " if at_most else ">= ") + f"{bound:g}", state))

    for targets_list, reported in ((TARGETS_10, False), (ATTENTION_ALONE, True)):
        for label, kind, cases, bound in targets_list:
            rs = [fa.get(c) for c in cases]
            if any(r is None for r in rs):
                continue
            if kind == "cudnn":
                pv, _ = peer_figure(peers, cases[0], "cudnn")
                if pv and num(rs[0].get("tflops")):
                    row(label, num(rs[0]["tflops"]) / pv, bound, reported=reported)
            elif kind == "copy" and num(rs[0].get("pct_peak_bw")):
                row(label, num(rs[0]["pct_peak_bw"]) / 100, bound, reported=reported)
            elif kind == "time_vs":
                row(label, num(rs[0]["median_time_us"]) / num(rs[1]["median_time_us"]), bound, at_most=True,
                    reported=reported)
            elif kind == "tflops_vs":
                row(label, num(rs[0]["tflops"]) / num(rs[1]["tflops"]), bound, reported=reported)
            elif kind == "parts":
                parts = num(rs[1]["median_time_us"]) + num(rs[2]["median_time_us"])
                row(label, num(rs[0]["median_time_us"]) / parts, bound, at_most=True, reported=reported)
    # Issue 9's MLA prefill, reported beside the hd128 prefill of the same shape (no bound).
    mla_pf = next((r for r in rows if r.get("case") == "mla_prefill" and r.get("backend") == "flashmla"
                   and r.get("status") == "pass"), None)
    fa_pf = fa.get("prefill_4x4k_ctx8k")
    if mla_pf and fa_pf and num(mla_pf.get("tflops")) and num(fa_pf.get("tflops")):
        out.append(("MLA prefill 4 x 4k on 8k TFLOP/s / hd128 same shape", f"{num(mla_pf['tflops']) / num(fa_pf['tflops']):.3f}",
                    f"{num(mla_pf['tflops']):.1f} / {num(fa_pf['tflops']):.1f}", "reported"))
    # Speculative decodes (16 x 8 tokens at 4k, 64q/8kv: 64 packed rows per item), reported beside the
    # 2-token decode (issue 10 bounds only that one).
    for case, label in (("decode_spec8", "spec decode 16 x 8 @ 4k 64q/8kv / copy"),
                        ("decode_spec8_g4", "spec decode 16 x 8 @ 4k 32q/8kv / copy")):
        spec = fa.get(case)
        if spec and num(spec.get("pct_peak_bw")):
            out.append((label, f"{num(spec['pct_peak_bw']) / 100:.3f}", "-", "reported"))
    # Issue 9: the MLA decode kernel (micro benchmark) against the copy bandwidth of this run (any
    # FLASH_ATTN decode row's GB/s over its share of it), 500 TFLOP/s, and 5 x the torch matmul MLA.
    copy = None
    for r in fa.values():
        tbs, pct = num(r.get("tb_per_sec")), num(r.get("pct_peak_bw"))
        if tbs and pct:
            copy = tbs * 1000 / (pct / 100)
            break
    for bm in (micro or {}).get("benchmarks", []):
        name = bm.get("name", "")
        if not name.startswith("BM_FlashMlaDecodeKernel/") or bm.get("error_occurred"):
            continue
        heads, reqs, ctx, q_len = (int(x) for x in name.split("/")[1:5])
        if q_len != 1:
            continue
        shape = f"MLA {heads} heads {reqs} x {ctx + 1}"
        t = bm.get("real_time", 0) * {"ns": 1e-3, "us": 1, "ms": 1e3}.get(bm.get("time_unit", "us"), 1)
        if heads == 16 and copy:
            row(f"{shape} / copy", bm.get("GB/s", 0) / copy, 0.9)
        if heads == 128:
            row(f"{shape} TFLOP/s", bm.get("TFLOP/s", 0), 500)
        for p in peers:
            if (p.get("case") == "mla_decode" and num(p.get("batch")) == reqs and num(p.get("kv_len")) == ctx + 1
                    and num(p.get("q_heads")) == heads and num(p.get("ms")) and t):
                row(f"{shape} / torch matmul MLA", num(p["ms"]) * 1000 / t, 5.0)
    return out


# Where a prefill's time goes, from two FLASH_ATTN rows with the same work items: 8 x 1k and 2 x 4k at
# llama3-8b's heads (causal, 128 x 128 tiles) both run 2048 items, over 9,216 and 33,792 key tiles.
# Their times fitted to a per key tile plus b per item, per CTA (one per SM: 132 on the H100 and the
# H200), for FLASH_ATTN and for the cuDNN peer (its time from its TFLOP/s on the same FLOPs, as if
# its tiles were the same): short prefills are paced by b (docs/PERF_NOTES.md, the thirty-sixth
# session's closing check).
FIT_SMS = 132
FIT_ITEMS = 2048
FIT_CASES = (("prefill_1k", 9216), ("prefill", 33792))


def item_fit(rows, peers):
    """(label, us per key tile, us per item) rows of the fit above, or just the header when a row or
    a figure is missing."""
    fa = {r.get("case"): r for r in rows if r.get("backend") == "flash_attn" and r.get("status") == "pass"}
    out = [("item cost fit (8 x 1k and 2 x 4k hd128)", "us per key tile", "us per item")]
    (c1, k1), (c2, k2) = FIT_CASES
    r1, r2 = fa.get(c1), fa.get(c2)
    if not r1 or not r2:
        return out
    t1, t2 = num(r1.get("median_time_us")), num(r2.get("median_time_us"))
    f1, f2 = num(r1.get("tflops")), num(r2.get("tflops"))
    if not (t1 and t2):
        return out

    def fit(label, t1, t2):
        per1, per2, items = k1 / FIT_SMS, k2 / FIT_SMS, FIT_ITEMS / FIT_SMS
        a = (t2 - t1) / (per2 - per1)
        out.append((label, f"{a:.2f}", f"{(t1 - a * per1) / items:.2f}"))

    fit("flash_attn", t1, t2)
    p1, _ = peer_figure(peers, c1, "cudnn")
    p2, _ = peer_figure(peers, c2, "cudnn")
    if p1 and p2 and f1 and f2:
        fit("cuDNN peer (if its tiles are 128 x 128)", t1 * f1 / p1, t2 * f2 / p2)
    return out


def print_table(out):
    widths = [max(len(str(row[i])) for row in out) for i in range(len(out[0]))]
    for i, row in enumerate(out):
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))


def mla_table(peers, micro_path):
    """The FLASHMLA decode kernel rows (BM_FlashMlaDecodeKernel/heads/requests/context/q_len) beside
    the torch plain-matmul MLA peer of the same shape (seq = context + 1)."""
    try:
        with open(micro_path) as f:
            micro = json.load(f)
    except (OSError, ValueError):
        return
    out = [("MLA decode kernel", "median us", "TFLOP/s", "GB/s", "kernel", "torch matmul us", "x torch")]
    for bm in micro.get("benchmarks", []):
        name = bm.get("name", "")
        if not name.startswith("BM_FlashMlaDecodeKernel/") or bm.get("error_occurred"):
            continue
        heads, reqs, ctx, q_len = (int(x) for x in name.split("/")[1:5])
        t = bm.get("real_time", 0) * {"ns": 1e-3, "us": 1, "ms": 1e3}.get(bm.get("time_unit", "us"), 1)
        label = bm.get("label", "")
        kernel = label.split("decode_kernel=")[1].split()[0] if "decode_kernel=" in label else "-"
        peer = None
        for p in peers:
            if (p.get("case") == "mla_decode" and num(p.get("batch")) == reqs and num(p.get("kv_len")) == ctx + 1
                    and num(p.get("q_heads")) == heads and q_len == 1):
                peer = num(p.get("ms"))
        out.append((f"{heads} heads, {reqs} x {ctx + 1}, q_len {q_len}", f"{t:.1f}", f"{bm.get('TFLOP/s', 0):.1f}",
                    f"{bm.get('GB/s', 0):.0f}", kernel, f"{peer * 1000:.1f}" if peer else "-",
                    f"{peer * 1000 / t:.2f}" if peer and t else "-"))
    if len(out) > 1:
        print()
        print_table(out)


def self_test():
    """Synthetic rows: each kind of target reads back its ratio and verdict."""
    fa = lambda case, **kw: dict(case=case, backend="flash_attn", status="pass", **{k: str(v) for k, v in kw.items()})
    rows = [fa("prefill", tflops=550, median_time_us=500), fa("prefill_1k", tflops=300, median_time_us=210),
            fa("decode", pct_peak_bw=97.5, tb_per_sec=2.955, median_time_us=360),
            fa("decode_fp8", median_time_us=190), fa("prefill_fp8q", tflops=500),
            fa("decode_2tok", pct_peak_bw=88.8), fa("decode_spec8", pct_peak_bw=77.5),
            fa("decode_spec8_g4", pct_peak_bw=83.5), fa("mixed", median_time_us=185),
            fa("mixed_decodes", median_time_us=150), fa("mixed_prefills", median_time_us=50),
            fa("prefill_4x4k_ctx8k", tflops=500), fa("prefill_1k_attn", tflops=360),
            fa("prefill_attn", tflops=560), fa("prefill_fp8q_attn", tflops=574),
            fa("mixed_attn", median_time_us=170), fa("mixed_decodes_attn", median_time_us=148),
            fa("mixed_prefills_attn", median_time_us=42),
            dict(case="mla_prefill", backend="flashmla", status="pass", tflops="300"),
            dict(case="decode_128x2k", backend="flashinfer", status="pass", pct_peak_bw="99")]
    peers = [dict(case="prefill_causal", peer="torch_sdpa_cudnn", batch="2", q_len="4096", kv_len="4096", q_heads="32",
                  kv_heads="8", head_dim="128", tflops="500"),
             dict(case="prefill_causal", peer="torch_sdpa_cudnn", batch="8", q_len="1024", kv_len="1024", q_heads="32",
                  kv_heads="8", head_dim="128", tflops="400"),
             dict(case="mla_decode", peer="torch_matmul", batch="64", kv_len="4096", q_heads="128", ms="0.65")]
    micro = {"benchmarks": [
        {"name": "BM_FlashMlaDecodeKernel/128/64/4095/1/manual_time", "real_time": 130.0, "time_unit": "us", "TFLOP/s": 560.0},
        {"name": "BM_FlashMlaDecodeKernel/16/64/4095/1/manual_time", "real_time": 116.0, "time_unit": "us", "GB/s": 2625.0}]}
    got = {r[0]: r[1:] for r in targets(rows, peers, micro)[1:]}
    want = {
        "prefill 2 x 4k hd128 / cuDNN": ("1.100", ">= 1", "met"),
        "prefill 8 x 1k / cuDNN": ("0.750", ">= 0.9", "missed"),
        "decode 64 x 4k / copy": ("0.975", ">= 0.95", "met"),
        "fp8 decode 64 x 4k time / bf16": ("0.528", "<= 0.55", "met"),
        "fp8 prefill 2 x 4k (quantized Q) / bf16 TFLOP/s": ("0.909", ">= 1", "missed"),
        "2-token decode 16 x 2 @ 4k / copy": ("0.888", ">= 0.9", "missed"),
        "mixed step / its parts apart": ("0.925", "<= 0.9", "missed"),
        "prefill 2 x 4k hd128 / cuDNN, attention alone": ("1.120", ">= 1", "reported: met"),
        "prefill 8 x 1k / cuDNN, attention alone": ("0.900", ">= 0.9", "reported: met"),
        "fp8 prefill 2 x 4k (quantized Q) / bf16 TFLOP/s, attention alone": ("1.025", ">= 1", "reported: met"),
        "mixed step / its parts apart, attention alone": ("0.895", "<= 0.9", "reported: met"),
        "MLA 128 heads 64 x 4096 TFLOP/s": ("560.000", ">= 500", "met"),
        "MLA 128 heads 64 x 4096 / torch matmul MLA": ("5.000", ">= 5", "met"),
        "MLA 16 heads 64 x 4096 / copy": ("0.866", ">= 0.9", "missed"),
        "MLA prefill 4 x 4k on 8k TFLOP/s / hd128 same shape": ("0.600", "300.0 / 500.0", "reported"),
        "spec decode 16 x 8 @ 4k 64q/8kv / copy": ("0.775", "-", "reported"),
        "spec decode 16 x 8 @ 4k 32q/8kv / copy": ("0.835", "-", "reported"),
    }
    assert got == want, got  # FLASHINFER's row and the targets without rows are left out
    # 500 and 210 us over 256.0 and 69.8 key tiles, 15.5 items per CTA: 1.56 us a key tile, then
    # (210 - 108.8) / 15.5; cuDNN at 550 and 157.5 us (its TFLOP/s 500 and 400).
    fit = {r[0]: r[1:] for r in item_fit(rows, peers)[1:]}
    assert fit == {"flash_attn": ("1.56", "6.53"), "cuDNN peer (if its tiles are 128 x 128)": ("2.11", "0.66")}, fit
    assert len(item_fit(rows[:1], peers)) == 1  # 8 x 1k missing: no fit
    print("gpu-summary self-test: ok")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    main()
