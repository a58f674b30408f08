#!/usr/bin/env python3
"""Summarises a conformance run: reads the JUnit report(s) e2e.test wrote under RESULTS_DIR
and prints a Markdown table of passed/failed/skipped/not run per SIG, then every failed spec
with the first line of its failure. Specs of conformance-specs.txt that the report does not
mention (the suite stopped early, or a focus left them out) are counted as "not run".
Without a JUnit report (e2e.test was stopped before it wrote one), the outcomes are read
from the e2e-*.log files (ginkgo's -v output) instead.

    hack/conformance-summary.py RESULTS_DIR [--specs conformance-specs.txt]
"""

import collections
import glob
import os
import re
import sys
import xml.etree.ElementTree as ET

SIG = re.compile(r"\[(sig-[a-z-]+)\]")


def spec_name(raw):
    """The spec text without ginkgo's node-type prefix ("[It] ")."""
    return re.sub(r"^\[[A-Za-z]+\]\s+", "", raw).strip()


SPEC_END = re.compile(r"^• (\[(FAILED|TIMEDOUT|PANICKED|INTERRUPTED)\] )?\[[0-9.]+ seconds\]")


def from_log(path, outcome, failures):
    """Outcomes from ginkgo's verbose log: a spec starts with its name and then its source
    line; it ends with "• [N seconds]" when it passed, or "• [FAILED] [N seconds]", its
    name and its "[FAILED] message" lines when it did not."""
    with open(path, errors="replace") as f:
        lines = f.read().split("\n")
    current = None
    for i, line in enumerate(lines):
        if line.startswith("[sig-") and i + 1 < len(lines) and lines[i + 1].startswith("/"):
            current = line.strip()
        m = SPEC_END.match(line)
        if not m:
            continue
        if not m.group(2):
            if current and "[Conformance]" in current:
                outcome[current] = "passed"
            continue
        name = spec_name(re.sub(r" \[It\] ", " ", lines[i + 1].strip())) if i + 1 < len(lines) else ""
        if "[Conformance]" not in name:
            continue
        outcome[name] = "failed"
        failures[name] = ""
        for follow in lines[i + 2 : i + 400]:
            text = follow.strip()
            if follow.startswith("------"):
                break
            if text.startswith(("[FAILED]", "[TIMEDOUT]", "[PANICKED]")) and not re.search(r" in \[\w+\] - ", text):
                failures[name] = text[:300]
                break


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    results = args[0]
    specs_file = None
    if "--specs" in args:
        specs_file = args[args.index("--specs") + 1]
    else:
        default = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "conformance", "conformance-specs.txt")
        if os.path.exists(default):
            specs_file = default

    reports = sorted(glob.glob(os.path.join(results, "**", "junit*.xml"), recursive=True))
    outcome = {}
    failures = {}
    if not reports:
        logs = sorted(glob.glob(os.path.join(results, "e2e-*.log")))
        if not logs:
            sys.exit(f"no junit*.xml and no e2e-*.log in {results}")
        for path in logs:
            from_log(path, outcome, failures)
    for path in reports:
        for case in ET.parse(path).getroot().iter("testcase"):
            name = spec_name(case.get("name", ""))
            if "[Conformance]" not in name:
                continue
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            if failure is not None:
                outcome[name] = "failed"
                text = (failure.get("message") or failure.text or "").strip()
                failures[name] = text.splitlines()[0][:300] if text else ""
            elif case.find("skipped") is not None:
                outcome.setdefault(name, "skipped")
            else:
                outcome[name] = "passed"

    expected = []
    if specs_file:
        with open(specs_file) as f:
            expected = [l.strip() for l in f if l.strip()]
    for name in expected:
        outcome.setdefault(name, "not run")

    table = collections.defaultdict(collections.Counter)
    for name, result in outcome.items():
        m = SIG.search(name)
        table[m.group(1) if m else "other"][result] += 1

    cols = ["passed", "failed", "skipped", "not run"]
    print("| SIG | " + " | ".join(cols) + " | total |")
    print("|---|" + "---|" * (len(cols) + 1))
    total = collections.Counter()
    for sig in sorted(table):
        c = table[sig]
        total.update(c)
        print(f"| {sig} | " + " | ".join(str(c[k]) for k in cols) + f" | {sum(c.values())} |")
    print("| **all** | " + " | ".join(str(total[k]) for k in cols) + f" | {sum(total.values())} |")
    print()
    if failures:
        print("## Failed specs\n")
        for name in sorted(failures):
            print(f"- {name}\n  - `{failures[name]}`")


if __name__ == "__main__":
    main()
