#!/usr/bin/env python3
"""Counts test cases from Bazel's test.xml files and prints the closing line.

Usage: count_results.py TESTLOGS_DIR TARGET... [-- TESTLOGS_DIR TARGET...]

Each group after a "--" is another build configuration's run; failures are
listed with their configuration's name. Each gtest case counts once. A
target whose XML is missing (it failed to build or never ran) counts as one
failure. The last line is exactly "N passed, M failed" (preceded by
"K skipped (not counted)" when any were skipped); exits 1 on failure.
"""
import os
import sys
import xml.etree.ElementTree as ET


def count_target(testlogs, target):
    rel = target.lstrip("/").replace(":", "/")
    xml_path = os.path.join(testlogs, rel, "test.xml")
    if not os.path.exists(xml_path):
        return 0, 1, 0, [f"{target}: no result (build failure or not run)"]
    passed = failed = skipped = 0
    failures = []
    root = ET.parse(xml_path).getroot()
    cases = root.iter("testcase")
    for case in cases:
        name = f"{target}:{case.get('classname', '')}.{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            failures.append(name)
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            skipped += 1
        else:
            passed += 1
    return passed, failed, skipped, failures


def groups(args):
    """Splits TESTLOGS TARGET... [-- TESTLOGS TARGET...] into groups."""
    group = []
    for a in args:
        if a == "--":
            if group:
                yield group[0], group[1:]
            group = []
        else:
            group.append(a)
    if group:
        yield group[0], group[1:]


def main():
    total_p = total_f = total_s = 0
    all_failures = []
    for testlogs, targets in groups(sys.argv[1:]):
        # .../bazel-out/k8-fastbuildtsan/testlogs: name the configuration.
        config = os.path.basename(os.path.dirname(os.path.normpath(testlogs)))
        for t in targets:
            p, f, s, fl = count_target(testlogs, t)
            total_p, total_f, total_s = total_p + p, total_f + f, total_s + s
            all_failures += [f"[{config}] {name}" for name in fl]
    for name in all_failures:
        print(f"FAILED: {name}")
    # The closing line is exactly "N passed, M failed" (CI reads it);
    # skipped cases are reported on the line before.
    if total_s:
        print(f"{total_s} skipped (not counted)")
    print(f"{total_p} passed, {total_f} failed")
    return 1 if total_f else 0


if __name__ == "__main__":
    sys.exit(main())
