#!/usr/bin/env python3
"""Splits the conformance specs into shards that separate e2e.test processes run at once
(the suite's specs are independent but for [Serial] ones; without the ginkgo CLI there is
no parallel runner, and most of a run is waiting on pods and timeouts).

    hack/conformance-shards.py SPECS_FILE OUT_DIR N [--quick] [--focus RE] [--skip RE]

Writes OUT_DIR/shard-<i>.regex (i = 1..N), each an exact-name focus regex for e2e.test's
--ginkgo.focus, and OUT_DIR/serial.regex with the [Serial] specs (which must run alone,
after the shards; empty in --quick mode, which leaves out [Serial] and [Disruptive]).
Specs are dealt round-robin in a fixed order, so a shard's contents are stable from run
to run. Prints how many specs each file holds.
"""

import argparse
import os
import re


def main():
    p = argparse.ArgumentParser()
    p.add_argument("specs")
    p.add_argument("out")
    p.add_argument("n", type=int)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--focus", default="")
    p.add_argument("--skip", default="")
    a = p.parse_args()
    if a.n < 1:
        p.error("N must be at least 1")
    with open(a.specs) as f:
        names = [l.strip() for l in f if l.strip()]
    focus = re.compile(a.focus) if a.focus else None
    skip = re.compile(a.skip) if a.skip else None
    parallel, serial = [], []
    for name in names:
        if focus and not focus.search(name):
            continue
        if skip and skip.search(name):
            continue
        alone = "[Serial]" in name or "[Disruptive]" in name
        if alone and a.quick:
            continue
        (serial if alone else parallel).append(name)
    os.makedirs(a.out, exist_ok=True)
    shards = [parallel[i :: a.n] for i in range(a.n)]
    for i, shard in enumerate(shards, 1):
        write(os.path.join(a.out, f"shard-{i}.regex"), shard)
        print(f"shard-{i}: {len(shard)} specs")
    write(os.path.join(a.out, "serial.regex"), serial)
    print(f"serial: {len(serial)} specs")


def write(path, names):
    # An alternation of exact names (unanchored: ginkgo matches the focus against the
    # spec's full text, which carries more than the listed name); an empty file means
    # "nothing to run".
    with open(path, "w") as f:
        if names:
            f.write("|".join(re.escape(n) for n in names))


if __name__ == "__main__":
    main()
