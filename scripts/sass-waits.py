#!/usr/bin/env python3
"""Where a kernel waits for its warpgroup MMAs, from the SASS that scripts/gpu-sass writes.

    scripts/sass-waits.py NAME.sass [--function REGEX]

For each function of the listing (cuobjdump -sass; all of them, or those whose name matches
REGEX): its HGMMA count and, for each WARPGROUP.DEPBAR (a wgmma wait), its address, the number
of groups it leaves in flight, the products issued since the wait before it, and the instructions
listed between it and the last product or wait before it, by opcode. That is how the sm_90a prefill's overlap was checked (PERF_NOTES Version
28): ptxas may move a wait up within its basic block, and the softmax it was meant to overlap
then shows up after it instead of before.

The counts follow the listing's order, not the control flow: a branch over a cold path (a soft
cap's tanh, say) counts that path's instructions too.
"""
import re
import sys
from collections import Counter

INSTR = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)")
PRED = re.compile(r"^@!?U?P\w+\s+")
SHOWN = ("FMNMX", "MUFU.EX2", "FFMA", "FADD", "FMUL", "F2FP", "SHFL", "VOTE", "SYNCS", "BAR", "BRA")


def functions(lines):
    """(name, [(address, instruction)]) per function; one unnamed function without headers."""
    name, body, out = "(listing)", [], []
    for line in lines:
        m = FUNC.match(line)
        if m:
            if body:
                out.append((name, body))
            name, body = m.group(1), []
            continue
        m = INSTR.match(line)
        if m:
            body.append((int(m.group(1), 16), m.group(2)))
    if body:
        out.append((name, body))
    return out


def opcode(instr):
    return PRED.sub("", instr).split()[0] if instr.strip() else ""


def summarize(name, body):
    hgmma = sum(1 for _, t in body if opcode(t).startswith("HGMMA"))
    print(f"{name}: {len(body)} instructions, {hgmma} HGMMA")
    since = Counter()  # instructions since the last product or wait
    issued = 0  # products since the last wait
    for addr, t in body:
        op = opcode(t)
        if op == "WARPGROUP.DEPBAR.LE":
            left = int(t.split(",")[-1].strip(), 16)
            mix = ", ".join(f"{k} {v}" for k, v in sorted(since.items()) if k.startswith(SHOWN))
            print(f"  {addr:#07x} wait (<= {left} in flight) after {issued} products; "
                  f"since the last product or wait: {mix or '-'}")
            since, issued = Counter(), 0
        elif op.startswith("HGMMA"):
            since = Counter()
            issued += 1
        else:
            since[op] += 1


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    pattern = None
    if "--function" in args:
        i = args.index("--function")
        pattern = re.compile(args[i + 1])
        del args[i:i + 2]
    with open(args[0]) as f:
        funcs = functions(f)
    shown = [(n, b) for n, b in funcs if pattern is None or pattern.search(n)]
    if not shown:
        print(f"sass-waits: no function in {args[0]} matches", file=sys.stderr)
        return 1
    for name, body in shown:
        summarize(name, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
