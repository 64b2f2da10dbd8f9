"""python-redis-lock (redis_lock), unchanged: acquire/release, a waiter
woken by the release (its Lua scripts and its signal list), expiry with
auto-renewal, and several processes doing locked increments.

Usage: python test_python_redis_lock.py PORT
"""
import sys
import threading
import time

import redis_lock

from common import check, client, increments

PROCS = 4
ROUNDS = 100


def basics(port):
    r = client(port)
    redis_lock.reset_all(r)
    lock = redis_lock.Lock(r, "res", expire=10)
    check(lock.acquire(blocking=False), "acquire a free lock")
    check(lock.locked(), "locked")
    other = redis_lock.Lock(r, "res", expire=10)
    check(not other.acquire(blocking=False), "held lock not acquired twice")
    # A waiter blocked in acquire() is woken by the release.
    got = []

    def wait():
        w = redis_lock.Lock(client(port), "res", expire=10)
        t = time.monotonic()
        got.append(w.acquire(timeout=8))
        got.append(time.monotonic() - t)
        w.release()

    th = threading.Thread(target=wait)
    th.start()
    time.sleep(0.3)
    lock.release()
    th.join(30)
    check(got and got[0], "the waiter got the lock")
    check(got[1] < 5, f"the waiter was woken promptly ({got[1]:.2f}s)")
    # Auto-renewal keeps a short lock alive past its expire.
    renew = redis_lock.Lock(r, "renew", expire=1, auto_renewal=True)
    check(renew.acquire(), "acquire with auto-renewal")
    time.sleep(1.6)
    check(r.exists("lock:renew") == 1, "auto-renewal extended the lock")
    renew.release()
    check(r.exists("lock:renew") == 0, "released")
    # Releasing twice raises NotAcquired.
    try:
        renew.release()
        raise AssertionError("a second release must raise")
    except redis_lock.NotAcquired:
        pass


def worker(port):
    r = client(port)
    for _ in range(ROUNDS):
        with redis_lock.Lock(r, "inc", expire=10):
            v = int(r.get("counter") or 0)
            r.set("counter", v + 1)


if __name__ == "__main__":
    port = int(sys.argv[1])
    basics(port)
    increments(port, worker, PROCS, ROUNDS)
    print("python-redis-lock: ok")
