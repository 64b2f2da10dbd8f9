#!/usr/bin/env python3
"""Where a Sentinel failover's time goes, per kind of node: for each round
of bench/sentinel-failover.sh (run with LOGS_TO=DIR), the time from the
kill -9 of the primary to each failover event the first Sentinel to log it
logged (+sdown, +odown, +try-failover, +elected-leader, +selected-slave,
+failover-state-send-slaveof-noone, +failover-state-wait-promotion,
+promoted-slave, +switch-master), and the medians per kind side by side.

Usage: bench/sentinel-phases.py DIR   (DIR/latchkey, DIR/redis)
"""
import datetime
import glob
import os
import re
import statistics
import sys

EVENTS = [
    "+sdown",
    "+odown",
    "+try-failover",
    "+elected-leader",
    "+selected-slave",
    "+failover-state-send-slaveof-noone",
    "+failover-state-wait-promotion",
    "+promoted-slave",
    "+switch-master",
]
# "12345:X 27 Nov 2026 23:11:23.160 # +sdown master mymaster 127.0.0.1 6379"
LINE = re.compile(r"^\d+:X (\d+ \w+ \d+ [\d:.]+) [#*-] (\+[\w-]+) (\w+)")


def events(kind_dir):
    """(ns since the epoch, event, on) from every sentinel log of a kind."""
    out = []
    for f in glob.glob(os.path.join(kind_dir, "**", "sentinel.log"), recursive=True):
        for line in open(f, errors="replace"):
            m = LINE.match(line)
            if not m or m.group(2) not in EVENTS:
                continue
            # Sentinel logs local time; this machine runs in UTC.
            t = datetime.datetime.strptime(m.group(1), "%d %b %Y %H:%M:%S.%f")
            t = t.replace(tzinfo=datetime.timezone.utc)
            out.append((int(t.timestamp() * 1e9), m.group(2), m.group(3)))
    return sorted(out)


def rounds(kind_dir):
    kills = [tuple(map(int, l.split())) for l in open(os.path.join(kind_dir, "kills"))]
    evs = events(kind_dir)
    per = []
    for n, (i, t0) in enumerate(kills):
        end = kills[n + 1][1] if n + 1 < len(kills) else t0 + 60 * 10**9
        first = {}
        for t, e, on in evs:
            # +sdown of a sentinel or replica is not the master's.
            if t0 <= t < end and e not in first and (e != "+sdown" or on == "master"):
                first[e] = (t - t0) / 1e6
        per.append(first)
    return per


def main():
    base = sys.argv[1]
    kinds = [k for k in ("latchkey", "redis") if os.path.isdir(os.path.join(base, k))]
    table = {k: rounds(os.path.join(base, k)) for k in kinds}
    print("| event (ms after the kill, median over rounds) | " + " | ".join(kinds) + " |")
    print("| --- |" + " ---: |" * len(kinds))
    for e in EVENTS:
        cells = []
        for k in kinds:
            xs = [r[e] for r in table[k] if e in r]
            cells.append(f"{statistics.median(xs):.0f} ({len(xs)})" if xs else "-")
        print(f"| {e} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
