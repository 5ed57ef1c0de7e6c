#!/usr/bin/env python3
"""Medians of the last `cargo bench --bench acker` run, per tree and per operation, with
the ratios the project's speed targets are stated in (printed at the end).

Reads criterion's estimates under $CARGO_TARGET_DIR/criterion (default: ./target/criterion).
Run from the workspace root: `python3 benches/acker_summary.py`.
"""
import json
import os
import sys

OPS_PER_TREE = 5  # init + 4 acks
GROUPS = ["lifecycle/1t/1k-inflight", "lifecycle/1t/1M-pending", "lifecycle/2t/1k-inflight"]
ACK_GROUPS = ["ack/1t/64k-pending", "ack/1t/1M-pending"]
# Group 7: a million trees into a tracker built empty; the time is per tree.
FILL_GROUPS = ["fill/1t/1M-from-empty", "fill+acks/1t/1M-from-empty"]
EXPIRY_GROUP, EXPIRY_BATCH = "reaper/expire", 50_000  # EXPIRY_BATCH in acker.rs
CONTENDERS = ["ackwheel", "ackwheel-batched", "storm_port", "dashmap", "dashmap+wheel", "scc", "moka"]
# The Acker's cores: each gets a ratio column, peer time / its time. "ackwheel-batched"
# (the ack groups only) applies its acks in frames of 64 through `Acker::apply`.
OURS = ["ackwheel", "ackwheel-batched"]
ROOT = os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "criterion")


def median_ns(group, name):
    path = os.path.join(ROOT, group.replace("/", "_"), name, "new", "estimates.json")
    try:
        with open(path) as f:
            return json.load(f)["median"]["point_estimate"]
    except FileNotFoundError:
        return None


def ratio_header():
    return "".join(f" {'/' + o:>11}" for o in OURS)


def ratios(medians, g, c):
    """Contender c's time over each core's time in group g (> 1: that core is faster);
    blank in the core's own column."""
    m = medians[(g, c)]
    cols = []
    for o in OURS:
        ours = medians[(g, o)]
        cols.append(f"{m / ours:.2f}x" if ours and m is not None and c != o else "")
    return "".join(f" {r:>11}" for r in cols)


def main():
    medians = {(g, c): median_ns(g, c) for g in GROUPS + ACK_GROUPS + FILL_GROUPS for c in CONTENDERS}
    if all(v is None for v in medians.values()):
        sys.exit(f"no results under {ROOT}; run `cargo bench --bench acker` first")
    for g in GROUPS:
        print(g)
        print(f"  {'contender':<16} {'ns/tree':>10} {'ns/op':>9}{ratio_header()}")
        for c in CONTENDERS:
            m = medians[(g, c)]
            if m is None:
                if c not in OURS[1:]:  # the batched core runs in the ack groups only
                    print(f"  {c:<16} {'-':>10}")
                continue
            print(f"  {c:<16} {m:>10.1f} {m / OPS_PER_TREE:>9.1f}{ratios(medians, g, c)}")
    print("1 -> 2 threads, aggregate throughput (1t/1k time per tree / 2t time per tree):")
    for c in CONTENDERS:
        one, two = medians[("lifecycle/1t/1k-inflight", c)], medians[("lifecycle/2t/1k-inflight", c)]
        if one and two:
            print(f"  {c:<16} {one / two:.2f}x")
    for g in ACK_GROUPS:
        print(g)
        print(f"  {'contender':<16} {'ns/ack':>10}{ratio_header()}")
        for c in CONTENDERS:
            m = medians[(g, c)]
            if m is None:
                print(f"  {c:<16} {'-':>10}")
                continue
            print(f"  {c:<16} {m:>10.1f}{ratios(medians, g, c)}")
    for g in FILL_GROUPS:
        if all(medians[(g, c)] is None for c in CONTENDERS):
            continue
        print(g)
        print(f"  {'contender':<16} {'ns/tree':>10}{ratio_header()}")
        for c in CONTENDERS:
            m = medians[(g, c)]
            if m is None:
                continue
            # Criterion's time is per fill of a million trees.
            print(f"  {c:<16} {m / 1e6:>10.1f}{ratios(medians, g, c)}")
    for c in OURS:
        m = median_ns(EXPIRY_GROUP, c)
        if m is not None:
            print(f"{EXPIRY_GROUP} {c}: {m / 1e3:.1f} us per {EXPIRY_BATCH} trees timed out, "
                  f"{EXPIRY_BATCH / m * 1e3:.1f} M expirations/s")
    print("A column /X is the row's time over X's time (peer/ours): > 1 means X is faster.")
    # The project's speed targets.
    print("peer/ours > 1 means the Acker is faster; targets: 1k in flight, 1 thread >= 1.2x"
          " dashmap+wheel; 2 threads >= 3x storm_port, >= 1.5x dashmap, >= 1.2x scc, >= 2x"
          " dashmap+wheel, 1 -> 2 scaling >= 1.7x; an ack at 1M pending >= 1.2x dashmap one at"
          " a time, >= 2.5x batched; a fill of 1M from empty <= 2x dashmap's time (/ackwheel"
          " >= 0.5) and <= 0.7x dashmap+wheel's (>= 1.43); fill+acks one at a time >= 1.0x"
          " storm_port, dashmap and scc, >= 1.5x dashmap+wheel, batched >= 2.0x dashmap;"
          " >= 30x moka; >= 10 M expirations/s")


if __name__ == "__main__":
    main()
