#!/usr/bin/env python3
"""Instructions and locked instructions per tree of the one-thread lifecycle at 1k in
flight (examples/lifecycle_instructions.rs), counted by callgrind: repeatable whatever
else the machine is doing, unlike the benches' times.

    cargo build --release --features internals --example lifecycle_instructions
    python3 benches/instructions/count.py [acker batched dashmap]

and a tracked request of the async acker (examples/track_instructions.rs, 1k in flight, 4
inline acks each, or `--fanout N`), against DashMap + oneshot (`track-dashmap`):

    cargo build --release --features tokio --example track_instructions
    python3 benches/instructions/count.py [--fanout 16] track track-dashmap

Each kind runs twice (100k and 300k trees); the difference over 200k trees is the cost of
a tree, setup excluded. The functions that cost the most are listed below each total, ten
of them (`COUNT_TOP=30` lists thirty). Locked instructions are the `lock`-prefixed ones and `xchg` with a
memory operand (an `xchg` between registers, as around `cmpxchg16b`, is not locked). All
threads are counted (the Acker's reaper included).

With `--background N` the lifecycle runs beside N roots inited first and never acked (the
benches' `1M-pending` groups: large, cold tables). `--cache` also simulates this
machine's per-core caches (L1d 32 KiB, 8-way; L2 1 MiB, 16-way, as callgrind's last
level) and prints the L1 and L2 misses a tree, by function: a line missed in L2 is a trip
to L3 or memory, which a single thread waits for.

    python3 benches/instructions/count.py --background 1000000 --cache acker dashmap

`ack` and `ack-dashmap` count the benches' `ack/1t` groups instead: BACKGROUND roots held,
then acks of them one at a time in a shuffled order, none completing (a "tree" is then
one ack):

    python3 benches/instructions/count.py --background 1000000 --cache ack ack-dashmap

Callgrind runs the threads one at a time and about 50x slower than natively, so the
lifecycle's acker ticks every 64 ms under it instead of every 1 ms (the tracked request's
every 2^24 ns instead of 2^18), so that what is done by the clock, the reaper thread's
passes, at most 64 ticks apart while trees are pending, comes about as often a tree as
natively (at 1 ms it would come 50 times as often). The tracked request's passes scale
less: natively its reaper sleeps 2^26 ns (256 ticks of 2^18 ns), under callgrind 64 ticks
of 2^24 ns, so they come about 3 times as often a request. No tree reaches the reaper
either way: each completes long before its group's scan, due only 67 ms or so before its
600 s deadline."""
import collections
import os
import re
import subprocess
import sys
import tempfile

EXAMPLES = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release/examples")


def binary(kind, fanout=4):
    """The program that runs `kind` and its arguments before the tree count: `track` and
    `track-dashmap` are a tracked request and its peer (their own example, built with
    `--features tokio`, whose request count comes first), the rest the lifecycle's
    contenders."""
    if kind in ("track", "track-dashmap"):
        contender = "dashmap" if kind == "track-dashmap" else "ackwheel"
        # The async acker's tick (2^18 ns) times 64, as the lifecycle's below.
        return (os.path.join(EXAMPLES, "track_instructions"), [],
                [str(fanout), contender, str(64 << 18)])
    return os.path.join(EXAMPLES, "lifecycle_instructions"), [kind], []
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


def profile(kind, trees, locked, background, cache, fanout):
    """Counters of one run: per event (`Ir`, and with `cache` the misses `D1mr`, `DLmr`,
    ...) and `locked`, in all and by function."""
    program, args, after = binary(kind, fanout)
    sim = ["--cache-sim=yes", "--D1=32768,8,64", "--LL=1048576,16,64"] if cache else []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "cg.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
                        "--compress-strings=no", *sim, f"--callgrind-out-file={out}", program,
                        *args, str(trees), *(after if after else [str(background), "64"])],
                       check=True, capture_output=True)
        positions, events, fn, after_call = 1, [], None, False
        total, by_fn = collections.Counter(), collections.defaultdict(collections.Counter)
        for line in open(out):
            if line.startswith("positions:"):
                positions = len(line.split()) - 1  # the instruction's address, its line
            elif line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                after_call = True  # the next cost line is the call's inclusive cost
            elif line.startswith("0x"):
                parts = line.split()
                if after_call:
                    after_call = False
                    continue
                costs = dict(zip(events, map(int, parts[positions:])))
                if int(parts[0], 16) in locked:
                    costs["locked"] = costs.get("Ir", 0)
                total.update(costs)
                by_fn[fn].update(costs)
        return total, by_fn


def main():
    argv, background, cache, fanout = sys.argv[1:], 0, False, 4
    if "--fanout" in argv:
        i = argv.index("--fanout")
        fanout = int(argv[i + 1])
        del argv[i:i + 2]
    if "--background" in argv:
        i = argv.index("--background")
        background = int(argv[i + 1])
        del argv[i:i + 2]
    if "--cache" in argv:
        argv.remove("--cache")
        cache = True
    kinds = argv or ["acker", "batched", "dashmap"]
    n = LARGE - SMALL
    for kind in kinds:
        locked = locked_addresses(binary(kind)[0])
        small, large = (profile(kind, trees, locked, background, cache, fanout)
                        for trees in (SMALL, LARGE))

        def per_tree(events, fn=None):
            a, b = (small[0], large[0]) if fn is None else (small[1].get(fn, {}), large[1][fn])
            return sum(b.get(e, 0) - a.get(e, 0) for e in events) / n

        print(f"{kind}: {per_tree(['Ir']):.0f} instructions a tree, "
              f"{per_tree(['locked']):.2f} locked a tree")
        by = lambda events: collections.Counter({f: per_tree(events, f) for f in large[1]})
        for f, c in by(["Ir"]).most_common(int(os.environ.get("COUNT_TOP", "10"))):
            print(f"  {c:8.1f}  {f[:100]}")
        for f, c in by(["locked"]).most_common():
            if c >= 0.05:
                print(f"  locked {c:5.2f}  {f[:100]}")
        if cache:
            l1, l2 = ["D1mr", "D1mw"], ["DLmr", "DLmw"]
            print(f"  misses a tree: L1 {per_tree(l1):.2f}, L2 {per_tree(l2):.2f}")
            for f, c in by(l2).most_common(8):
                if c >= 0.05:
                    print(f"  L2 {c:5.2f}  L1 {per_tree(l1, f):5.2f}  {f[:100]}")


if __name__ == "__main__":
    main()
