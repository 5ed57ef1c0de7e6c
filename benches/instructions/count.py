#!/usr/bin/env python3
"""Instructions and locked instructions per tree of the one-thread lifecycle at 1k in
flight (examples/lifecycle_instructions.rs), counted by callgrind: repeatable whatever
else the machine is doing, unlike the benches' times.

    cargo build --release --example lifecycle_instructions
    python3 benches/instructions/count.py [acker batched dashmap]

and a tracked request of the async acker (examples/track_instructions.rs, 1k in flight, 4
inline acks each):

    cargo build --release --features tokio --example track_instructions
    python3 benches/instructions/count.py track

Each kind runs twice (100k and 300k trees); the difference over 200k trees is the cost of
a tree, setup excluded. Locked instructions are the `lock`-prefixed ones and `xchg` with a
memory operand (an `xchg` between registers, as around `cmpxchg16b`, is not locked). All
threads are counted (the Acker's reaper included)."""
import collections
import os
import re
import subprocess
import sys
import tempfile

EXAMPLES = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release/examples")


def binary(kind):
    """The program that runs `kind`: `track` is a tracked request (its own example, built
    with `--features tokio`), the rest the lifecycle's contenders."""
    if kind == "track":
        return os.path.join(EXAMPLES, "track_instructions"), []
    return os.path.join(EXAMPLES, "lifecycle_instructions"), [kind]
SMALL, LARGE = 100_000, 300_000


def locked_addresses(program):
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", program],
                         capture_output=True, text=True, check=True).stdout
    locked = set()
    for line in dis.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(.*)", line)
        if not m:
            continue
        insn = m.group(2)
        if re.search(r"\block\b", insn) or (insn.startswith("xchg") and "(" in insn):
            locked.add(int(m.group(1), 16))
    return locked


def profile(kind, trees, locked):
    """(instructions, locked, per function, locked per function) of one run."""
    program, args = binary(kind)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
                        "--compress-strings=no", f"--callgrind-out-file={out}", program, *args,
                        str(trees)], check=True, capture_output=True)
        total = lock = 0
        by_fn, lock_by_fn = collections.Counter(), collections.Counter()
        fn, after_call = None, False
        for line in open(out):
            if line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                after_call = True  # the next cost line is the call's inclusive cost
            elif line.startswith("0x"):
                parts = line.split()
                if after_call:
                    after_call = False
                    continue
                ir = int(parts[-1]) if len(parts) >= 3 else 0
                total += ir
                by_fn[fn] += ir
                if int(parts[0], 16) in locked:
                    lock += ir
                    lock_by_fn[fn] += ir
        return total, lock, by_fn, lock_by_fn


def main():
    kinds = sys.argv[1:] or ["acker", "batched", "dashmap"]
    n = LARGE - SMALL
    for kind in kinds:
        locked = locked_addresses(binary(kind)[0])
        small, large = profile(kind, SMALL, locked), profile(kind, LARGE, locked)
        print(f"{kind}: {(large[0] - small[0]) / n:.0f} instructions a tree, "
              f"{(large[1] - small[1]) / n:.2f} locked a tree")
        per_fn = collections.Counter({f: (c - small[2].get(f, 0)) / n for f, c in large[2].items()})
        for f, c in per_fn.most_common(10):
            print(f"  {c:8.1f}  {f[:100]}")
        per_fn = collections.Counter({f: (c - small[3].get(f, 0)) / n for f, c in large[3].items()})
        for f, c in per_fn.most_common():
            if c >= 0.05:
                print(f"  locked {c:5.2f}  {f[:100]}")


if __name__ == "__main__":
    main()
