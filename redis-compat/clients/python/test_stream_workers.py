"""A redis-py consumer-group worker pool, unchanged redis-py: a producer
XADDs 3,000 entries in batches while 4 worker processes read them with
XREADGROUP (BLOCK, COUNT), process and XACK. One more worker (the victim)
acks two batches, reads a third and holds it unacknowledged until it is
SIGKILLed; the survivors take its pending entries over with XAUTOCLAIM
(min-idle-time 500 ms). At the end every entry was acknowledged exactly
once (XACK replied 1 once per entry), nothing is lost, XPENDING's summary
is 0 and XINFO GROUPS agrees.

Usage: python test_stream_workers.py PORT
"""
import multiprocessing
import sys
import time

from common import check, client

N = 3000
BATCH = 100
WORKERS = 4
MIN_IDLE_MS = 500
DEADLINE = 120  # seconds, for the whole test
STREAM, GROUP = "ws:stream", "ws:group"
ACKS = "ws:acks"  # hash: entry id -> times XACK replied 1 for it
RUNS = "ws:runs"  # hash: entry id -> times a worker processed it
CLAIMED = "ws:claimed"  # counter: entries taken over with XAUTOCLAIM
DONE = "ws:producer-done"
HOLDING = "ws:victim-holding"


def process(r, name, entries):
    """Processes and acks entries, counting runs and successful acks."""
    for eid, fields in entries:
        check(fields.get(b"n") is not None, f"entry {eid} has its field")
        r.hincrby(RUNS, eid, 1)
        acked = r.xack(STREAM, GROUP, eid)
        if acked == 1:
            r.hincrby(ACKS, eid, 1)


def survivor(port, name):
    r = client(port)
    end = time.monotonic() + DEADLINE
    claim_from = "0-0"
    while time.monotonic() < end:
        # Seen before the read: if set, the read below sees every entry.
        done = r.exists(DONE)
        got = r.xreadgroup(GROUP, name, {STREAM: ">"}, count=10, block=100)
        if got:
            process(r, name, got[0][1])
            continue
        # Nothing new: take over entries idle for MIN_IDLE_MS.
        claim_from, claimed, deleted = r.xautoclaim(
            STREAM, GROUP, name, MIN_IDLE_MS, start_id=claim_from, count=20
        )
        check(deleted == [], f"no deleted entries reported ({deleted})")
        if claimed:
            r.incrby(CLAIMED, len(claimed))
            process(r, name, claimed)
            continue
        if done and r.xpending(STREAM, GROUP)["pending"] == 0:
            return
    sys.exit(f"{name}: out of time")


def victim(port):
    r = client(port)
    end = time.monotonic() + DEADLINE
    batches = 0
    while time.monotonic() < end:
        got = r.xreadgroup(GROUP, "victim", {STREAM: ">"}, count=50, block=100)
        if not got:
            if r.exists(DONE):
                sys.exit("victim: the stream ran dry before it held a batch")
            continue
        batches += 1
        if batches < 3:
            process(r, "victim", got[0][1])
            continue
        # Holds the batch unacknowledged until killed.
        r.set(HOLDING, len(got[0][1]))
        time.sleep(DEADLINE)
    sys.exit("victim: out of time")


def main(port):
    start = time.monotonic()
    r = client(port)
    r.delete(STREAM, ACKS, RUNS, CLAIMED, DONE, HOLDING)
    r.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    v = multiprocessing.Process(target=victim, args=(port,))
    v.start()
    ps = [multiprocessing.Process(target=survivor, args=(port, f"w{k}")) for k in range(WORKERS)]
    for p in ps:
        p.start()
    try:
        ids = []
        for b in range(N // BATCH):
            pipe = r.pipeline(transaction=False)
            for k in range(BATCH):
                pipe.xadd(STREAM, {"n": b * BATCH + k})
            ids += [i.decode() for i in pipe.execute()]
            if v.exitcode is None and r.exists(HOLDING):
                # The victim holds a batch: SIGKILL it, mid-way.
                v.kill()
                v.join(10)
            time.sleep(0.01)
        for _ in range(1000):
            if v.exitcode is not None or r.exists(HOLDING):
                break
            time.sleep(0.01)
        check(r.exists(HOLDING), f"the victim held a batch (exit {v.exitcode})")
        if v.exitcode is None:
            v.kill()
            v.join(10)
        check(v.exitcode == -9, f"the victim was SIGKILLed ({v.exitcode})")
        r.set(DONE, 1)
        for p in ps:
            p.join(max(1, DEADLINE - (time.monotonic() - start)))
            check(p.exitcode == 0, f"worker exit code {p.exitcode}")
    finally:
        for p in ps + [v]:
            if p.exitcode is None:
                p.kill()
    held = int(r.get(HOLDING))
    acks = {k.decode(): int(n) for k, n in r.hgetall(ACKS).items()}
    runs = {k.decode(): int(n) for k, n in r.hgetall(RUNS).items()}
    check(len(ids) == N and r.xlen(STREAM) == N, "every entry is in the stream")
    check(set(acks) == set(ids), f"acked {len(acks)} distinct entries of {N}")
    check(all(n == 1 for n in acks.values()), "each entry acknowledged exactly once")
    check(set(runs) == set(ids), "each entry processed")
    claimed = int(r.get(CLAIMED) or 0)
    check(claimed >= held, f"the victim's {held} held entries were claimed ({claimed})")
    summary = r.xpending(STREAM, GROUP)
    check(summary["pending"] == 0, f"XPENDING summary {summary}")
    check(r.xpending_range(STREAM, GROUP, "-", "+", 10) == [], "no pending entries")
    (info,) = r.xinfo_groups(STREAM)
    check(info["pending"] == 0 and info["entries-read"] == N and info["lag"] == 0, f"XINFO GROUPS {info}")
    consumers = {c["name"].decode(): c for c in r.xinfo_consumers(STREAM, GROUP)}
    check(set(consumers) == {"victim"} | {f"w{k}" for k in range(WORKERS)}, f"consumers {sorted(consumers)}")
    check(consumers["victim"]["pending"] == 0, "the victim's entries all moved")
    check(r.xgroup_delconsumer(STREAM, GROUP, "victim") == 0, "the dead consumer has nothing pending")
    r.delete(STREAM, ACKS, RUNS, CLAIMED, DONE, HOLDING)
    print(
        f"stream workers: ok ({N} entries, {held} held by the killed consumer, "
        f"{claimed} claimed, {sum(runs.values())} runs, {time.monotonic() - start:.1f}s)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]))
