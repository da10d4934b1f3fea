#!/usr/bin/env python3
"""Closing table of scripts/gpu-check: attn-bench's timings next to the torch peers.

Usage: gpu-summary.py BENCH.csv [PEERS.csv] [MICRO.json]
BENCH.csv is attn-bench's results CSV with a leading `case` column (decode, prefill, mixed,
cascade_on, cascade_off) added by gpu-check. The peer figure of a case is the best torch
result for the same shape: GB/s for decode-like cases, TFLOP/s for prefill. "read floor" is the
row's pct_read_floor: a bare streaming read of its bytes as a share of its time.
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
    "prefill_1k": ("prefill_causal", 8, 1024, 1024, "tflops"),
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
    with open(sys.argv[1], newline="") as f:
        rows = list(csv.DictReader(f))
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
    if len(sys.argv) > 3:
        mla_table(peers, sys.argv[3])


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


if __name__ == "__main__":
    main()
