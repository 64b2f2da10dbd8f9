"""redis-py's Lock, unchanged: acquire, extend, reacquire, release, a
blocking acquire with a timeout, and 8 processes x 200 locked increments
that must end exact.

Usage: python test_redis_py_lock.py PORT
"""
import sys
import time

import redis

from common import check, client, increments

PROCS = 8
ROUNDS = 200


def basics(port):
    r = client(port)
    r.delete("lk", "counter")
    lock = r.lock("lk", timeout=10)
    check(lock.acquire(blocking=False), "acquire a free lock")
    check(lock.locked() and lock.owned(), "locked and owned after acquire")
    other = r.lock("lk", timeout=10)
    check(not other.acquire(blocking=False), "a held lock is not acquired twice")
    ttl = r.pttl("lk")
    check(0 < ttl <= 10000, f"lock ttl set ({ttl})")
    check(lock.extend(20), "extend adds time")
    check(r.pttl("lk") > 10000, "extend took effect")
    check(lock.reacquire(), "reacquire resets the ttl")
    check(r.pttl("lk") <= 10000, "reacquire took effect")
    lock.release()
    check(not lock.locked(), "released")
    check(r.get("lk") is None, "the key is gone after release")
    # Releasing a lock someone else now holds fails and leaves theirs.
    lock.acquire()
    r.set("lk", "someone-else")
    try:
        lock.release()
        raise AssertionError("release of a lock not owned must raise")
    except redis.exceptions.LockNotOwnedError:
        pass
    check(r.get("lk") == b"someone-else", "a foreign lock is left alone")
    r.delete("lk")
    # Blocking acquire with a timeout gives up in about that time.
    holder = r.lock("lk", timeout=10)
    holder.acquire()
    waiter = r.lock("lk", timeout=10, blocking_timeout=0.3, sleep=0.05)
    t = time.monotonic()
    got = waiter.acquire()
    dt = time.monotonic() - t
    check(not got, "blocking acquire times out on a held lock")
    check(0.25 <= dt < 3.0, f"blocking timeout honoured ({dt:.2f}s)")
    holder.release()
    check(waiter.acquire(), "acquired once released")
    waiter.release()
    # The context manager form.
    with r.lock("lk", timeout=10):
        check(r.exists("lk") == 1, "held inside with")
    check(r.exists("lk") == 0, "released after with")


def worker(port):
    r = client(port)
    for _ in range(ROUNDS):
        with r.lock("lk", timeout=10, blocking_timeout=60, sleep=0.001):
            v = int(r.get("counter") or 0)
            r.set("counter", v + 1)


if __name__ == "__main__":
    port = int(sys.argv[1])
    basics(port)
    increments(port, worker, PROCS, ROUNDS)
    print("redis-py Lock: ok")
