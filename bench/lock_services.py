#!/usr/bin/env python3
"""Lock services side by side (issue 22): ZooKeeper (kazoo's Lock recipe),
etcd (its v3 lock API over the JSON gateway, with a lease) and Latchkey
(`SETTP ... QUEUE` with redis-py), driven by bench/lock-services.sh, which
starts the servers on free loopback ports and stops them.

Subcommands (the script runs them; by hand only for debugging):

  wait SYSTEM ADDR                    until the service answers (<= 30 s)
  worker SYSTEM ADDR LOCK COUNTER N   N cycles of acquire -> read the counter
                                      file -> write it + 1 -> release; waits
                                      for a line on stdin before starting,
                                      prints {"start": t, "end": t} (monotonic)
  holder SYSTEM ADDR LOCK             takes LOCK, prints "held", sleeps
  waiter SYSTEM ADDR LOCK             prints "waiting", takes LOCK, prints the
                                      monotonic time it got it
  bench --zk ADDR --etcd ADDR --lk-repl ADDR --lk ADDR --pids ... --workdir DIR
        [--rounds 3] [--workers 16] [--cycles 100] [--warmup-cycles 100]
        [--failover-reps 5] [--md FILE]

SYSTEM is zk, etcd or lk. ADDR is host:port (127.0.0.1 only).

Why these clients: kazoo is the Python ZooKeeper client and its `Lock` is the
recipe Python users take; etcd 3.4 has no maintained pure-Python v3 client
(python-etcd3 needs grpcio and is unmaintained), and its gRPC gateway serves
the same Lock/Lease RPCs as JSON over HTTP, so the standard library's
http.client (one persistent connection per worker, as a gRPC channel would
be) is enough; Latchkey is spoken to with redis-py, the client its Python
users already have: SETTP/TPRELEASE go through `execute_command`, and the
hand-off push of a queued SETTP (a plain 5-element array between replies in
RESP2) is read with the connection's own `read_response()`.
"""

import argparse
import base64
import http.client
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ETCD_LEASE_TTL = 5  # seconds: the etcd lease of every holder
ZK_SESSION = 4.0  # seconds: kazoo's session timeout
WORKER_DEADLINE = 300  # seconds: a worker never outlives this (SIGALRM)


def hostport(addr):
    host, port = addr.rsplit(":", 1)
    assert host == "127.0.0.1", "loopback only"
    return host, int(port)


# ---------------------------------------------------------------- clients


class ZkLock:
    """kazoo's Lock recipe: an ephemeral sequential node under the lock path,
    watch the predecessor, hold when first."""

    def __init__(self, addr, name):
        from kazoo.client import KazooClient

        self.zk = KazooClient(hosts=addr, timeout=ZK_SESSION)
        self.zk.start(timeout=15)
        self.lock = self.zk.Lock("/lockbench/" + name, str(os.getpid()))

    def acquire(self):
        assert self.lock.acquire(timeout=60), "zk lock not acquired in 60 s"

    def release(self):
        self.lock.release()


class EtcdLock:
    """etcd's v3 lock API over the JSON gateway: a lease per worker (kept
    alive every TTL/3 s, as clientv3's concurrency.Session does), /v3/lock/lock
    with it (the call returns once the lock is held), /v3/lock/unlock with the
    key it returned."""

    def __init__(self, addr, name):
        self.host, self.port = hostport(addr)
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        self.name = base64.b64encode(name.encode()).decode()
        self.lease = self.call(self.conn, "/v3/lease/grant", {"TTL": ETCD_LEASE_TTL})["ID"]
        self.key = None
        self.stop = threading.Event()
        threading.Thread(target=self.keepalive, daemon=True).start()

    @staticmethod
    def call(conn, path, body):
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"etcd {path}: {resp.status} {data[:200]!r}")
        return json.loads(data)

    def keepalive(self):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        while not self.stop.wait(ETCD_LEASE_TTL / 3):
            self.call(conn, "/v3/lease/keepalive", {"ID": self.lease})

    def acquire(self):
        self.key = self.call(self.conn, "/v3/lock/lock", {"name": self.name, "lease": self.lease})["key"]

    def release(self):
        self.call(self.conn, "/v3/lock/unlock", {"key": self.key})


class LkLock:
    """Latchkey: `SETTP lock value QUEUE`; 1 = held, 0 = queued, and the
    server then pushes `settp lock ACQUIRED value token` once it is ours.
    Released with `TPRELEASE lock value`. The value is unique per cycle."""

    def __init__(self, addr, name):
        import redis

        host, port = hostport(addr)
        self.r = redis.Redis(host=host, port=port, single_connection_client=True, socket_timeout=60)
        self.r.ping()
        self.name = name.encode()
        self.n = 0
        self.value = None

    def acquire(self):
        self.n += 1
        self.value = f"{os.getpid()}-{self.n}".encode()
        reply = self.r.execute_command("SETTP", self.name, self.value, "QUEUE")
        if reply == 1:
            return
        assert reply == 0, f"SETTP replied {reply!r}"
        push = self.r.connection.read_response()
        assert push[:4] == [b"settp", self.name, b"ACQUIRED", self.value], f"unexpected push {push!r}"

    def release(self):
        assert self.r.execute_command("TPRELEASE", self.name, self.value) == 1, "TPRELEASE released nothing"


CLIENTS = {"zk": ZkLock, "etcd": EtcdLock, "lk": LkLock}
NAMES = {"zk": "ZooKeeper 3.8 (kazoo Lock)", "etcd": "etcd 3.4 (lock API, 5 s lease)"}


# ---------------------------------------------------------------- processes


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def cmd_wait(system, addr):
    import logging

    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # "connection refused" until it is up
    deadline = time.monotonic() + 30
    while True:
        try:
            if system == "zk":
                from kazoo.client import KazooClient

                zk = KazooClient(hosts=addr, timeout=ZK_SESSION)
                zk.start(timeout=3)
                zk.stop()
                zk.close()
            elif system == "etcd":
                host, port = hostport(addr)
                c = http.client.HTTPConnection(host, port, timeout=3)
                EtcdLock.call(c, "/v3/maintenance/status", {})
            else:
                import redis

                host, port = hostport(addr)
                redis.Redis(host=host, port=port, socket_timeout=3).ping()
            return
        except Exception as e:  # noqa: BLE001 - any failure means not up yet
            if time.monotonic() > deadline:
                sys.exit(f"{system} on {addr} did not answer in 30 s: {e}")
            time.sleep(0.2)


def cmd_worker(system, addr, lock, counter, cycles):
    lk = CLIENTS[system](addr, lock)
    say("ready")
    sys.stdin.readline()  # the go signal
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.monotonic()
    # The counter file is opened once and read and written in place (the
    # number only grows, so it never needs truncating): reopening it with
    # "w" every cycle costs hundreds of us on ext4 (a truncated file is flushed at
    # close, auto_da_alloc), all of it inside the lock.
    fd = os.open(counter, os.O_RDWR)
    for _ in range(cycles):
        lk.acquire()
        n = int(os.pread(fd, 32, 0))
        os.pwrite(fd, str(n + 1).encode(), 0)
        lk.release()
    os.close(fd)
    end = time.monotonic()
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime  # all its threads
    say(json.dumps({"start": start, "end": end, "cpu": cpu}))


def cmd_holder(system, addr, lock):
    lk = CLIENTS[system](addr, lock)
    lk.acquire()
    say("held")
    time.sleep(WORKER_DEADLINE)


def cmd_waiter(system, addr, lock):
    lk = CLIENTS[system](addr, lock)
    say("waiting")
    lk.acquire()
    say(repr(time.monotonic()))


def spawn(*args):
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
    )


def expect(p, what, timeout):
    """The next stdout line of p, which must be `what` (or anything if None);
    gives up after timeout seconds."""
    box = []
    t = threading.Thread(target=lambda: box.append(p.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    if not box or not box[0]:
        raise RuntimeError(f"no {what or 'line'} from {p.args[2:5]} in {timeout} s")
    line = box[0].strip()
    if what is not None and line != what:
        raise RuntimeError(f"expected {what}, got {line!r}")
    return line


def reap(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def proc_cpu(pids):
    """CPU seconds (user + system) the processes used so far."""
    ticks = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def throughput(system, addr, lock, counter, workers, cycles, server_pids):
    """One row: `workers` processes, `cycles` each; returns acquisitions/s
    over the first start to the last end, the wall time, the counter file's
    value, and the CPU seconds of the server(s) and of the workers."""
    with open(counter, "w") as f:
        f.write("0")
    procs = [spawn("worker", system, addr, lock, counter, str(cycles)) for _ in range(workers)]
    try:
        for p in procs:
            expect(p, "ready", 30)
        cpu0 = proc_cpu(server_pids)
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        spans = [json.loads(expect(p, None, 240)) for p in procs]
        server_cpu = proc_cpu(server_pids) - cpu0
        for p in procs:
            if p.wait(timeout=10) != 0:
                raise RuntimeError(f"{system} worker exited {p.returncode}")
    finally:
        reap(procs)
    wall = max(s["end"] for s in spans) - min(s["start"] for s in spans)
    with open(counter) as f:
        value = int(f.read())
    return workers * cycles / wall, wall, value, server_cpu, sum(s["cpu"] for s in spans)


def failover(system, addr, lock):
    """kill -9 of a holder while a waiter waits: seconds from the kill to
    the waiter's acquisition."""
    holder = spawn("holder", system, addr, lock)
    waiter = None
    try:
        expect(holder, "held", 30)
        waiter = spawn("waiter", system, addr, lock)
        expect(waiter, "waiting", 30)
        time.sleep(0.5)  # the waiter's request reaches the server and waits
        if waiter.poll() is not None:
            raise RuntimeError("waiter ended before the kill")
        t_kill = time.monotonic()
        os.kill(holder.pid, signal.SIGKILL)
        t_acq = float(expect(waiter, None, 60))
        return t_acq - t_kill
    finally:
        reap([p for p in (holder, waiter) if p])


def fmt_rate(x):
    return f"{x:,.0f}"


def cmd_bench(a):
    systems = [("zk", a.zk, NAMES["zk"]), ("etcd", a.etcd, NAMES["etcd"]),
               ("lk-repl", a.lk_repl, "Latchkey, 1 replica acks every grant (tp-min-acks 1)"),
               ("lk", a.lk, "Latchkey, no replica (tp-min-acks 0)")]
    # --pids zk=1,etcd=2,lk-repl=3+4,lk=5: the server processes of each row
    # (the replica counts in its row).
    pids = {k: [int(x) for x in v.split("+")] for k, v in (kv.split("=") for kv in a.pids.split(","))}
    counter = os.path.join(a.workdir, "counter")
    rates = {s[0]: [] for s in systems}
    walls = {s[0]: [] for s in systems}
    scpu = {s[0]: 0.0 for s in systems}
    ccpu = {s[0]: 0.0 for s in systems}
    bad = []
    t0 = time.monotonic()
    # One uncounted round first, so no system is measured cold (ZooKeeper's
    # JVM used 3x the CPU per acquisition in its first round as in its third).
    if a.warmup_cycles:
        for key, addr, _ in systems:
            kind = "lk" if key.startswith("lk") else key
            rate, _, value, _, _ = throughput(kind, addr, f"warmup-{key}", counter, a.workers, a.warmup_cycles, pids[key])
            if value != a.workers * a.warmup_cycles:
                bad.append(f"{key} warm-up: counter {value}, expected {a.workers * a.warmup_cycles}")
            print(f"warm-up {key:8} {rate:8.0f} acq/s (not counted)", flush=True)
    for rnd in range(a.rounds):
        # Interleaved, and the order rotates each round so no system is
        # always first (or last) after the same neighbour.
        order = systems[rnd % len(systems):] + systems[:rnd % len(systems)]
        for key, addr, _ in order:
            kind = "lk" if key.startswith("lk") else key
            rate, wall, value, sc, cc = throughput(kind, addr, f"tp-r{rnd}-{key}", counter, a.workers, a.cycles, pids[key])
            ok = value == a.workers * a.cycles
            if not ok:
                bad.append(f"{key} round {rnd + 1}: counter {value}, expected {a.workers * a.cycles}")
            rates[key].append(rate)
            walls[key].append(wall)
            scpu[key] += sc
            ccpu[key] += cc
            print(f"round {rnd + 1} {key:8} {rate:8.0f} acq/s  ({wall:.2f} s, counter {value} {'ok' if ok else 'BROKEN'}, "
                  f"CPU server {sc:.2f} s, workers {cc:.2f} s)", flush=True)
    fo = {s[0]: [] for s in systems}
    for rep in range(a.failover_reps):
        for key, addr, _ in systems:
            kind = "lk" if key.startswith("lk") else key
            secs = failover(kind, addr, f"fo-{rep}-{key}")
            fo[key].append(secs)
            print(f"failover {rep + 1} {key:8} {secs * 1000:9.2f} ms", flush=True)
    elapsed = time.monotonic() - t0

    # Pooled: every acquisition of every round over the rounds' summed wall time.
    pooled = {k: a.workers * a.cycles * len(walls[k]) / sum(walls[k]) for k in walls}
    lines = []
    lines.append(f"{a.workers} worker processes per system, {a.cycles} cycles each (acquire → read the counter file → "
                 f"write it + 1 → release) on one lock; {a.rounds} rounds, systems interleaved (order rotated each round), "
                 f"after an uncounted warm-up round of {a.warmup_cycles} cycles per worker. "
                 f"Acquisitions/s = {a.workers * a.cycles} / (last worker's end − first worker's start); pooled = all "
                 f"rounds' acquisitions over their summed wall time. CPU µs/acq: user + system CPU of the server process(es: the primary and its replica for "
                 f"the replicated row) and of the worker processes (every thread) during the rows, per acquisition. "
                 f"Failover: a holder takes the lock, a waiter waits, "
                 f"`kill -9` of the holder, time to the waiter's acquisition; {a.failover_reps} runs each.")
    lines.append("")
    lines.append("| system | acquisitions/s pooled | per round | counter | CPU µs/acq server / workers | failover median | failover min–max |")
    lines.append("| --- | ---: | --- | --- | ---: | ---: | --- |")
    for key, _, label in systems:
        ok = "ok" if not any(b.startswith(key + " ") for b in bad) else "**BROKEN**"
        f = fo[key]
        med = statistics.median(f)
        unit = (lambda s: f"{s * 1000:.2f} ms") if med < 1 else (lambda s: f"{s:.2f} s")
        n = a.workers * a.cycles * a.rounds
        lines.append(f"| {label} | {fmt_rate(pooled[key])} | {', '.join(fmt_rate(r) for r in rates[key])} | {ok} | "
                     f"{scpu[key] / n * 1e6:,.0f} / {ccpu[key] / n * 1e6:,.0f} | {unit(med)} | {unit(min(f))}–{unit(max(f))} |")
    lines.append("")
    lines.append("| ratio | pooled | per round | failover (median, how many times faster) | target ≥ 10x throughput |")
    lines.append("| --- | ---: | --- | ---: | --- |")
    for lk in ("lk-repl", "lk"):
        for other in ("zk", "etcd"):
            per = [x / y for x, y in zip(rates[lk], rates[other])]
            r = pooled[lk] / pooled[other]
            fr = statistics.median(fo[other]) / statistics.median(fo[lk])
            label = ("Latchkey+replica" if lk == "lk-repl" else "Latchkey alone") + " / " + ("ZooKeeper" if other == "zk" else "etcd")
            lines.append(f"| {label} | {r:.1f}x | {', '.join(f'{p:.1f}x' for p in per)} | {fr:,.0f}x | "
                         f"{'met' if min(per) >= 10 else ('met pooled, not every round' if r >= 10 else '**missed**')} |")
    lines.append("")
    lines.append(f"Run took {elapsed:.0f} s (servers already up). Host: {os.cpu_count()} CPUs, load average at the end "
                 f"{os.getloadavg()[0]:.2f}.")
    if bad:
        lines.append("")
        lines.append("Mutual exclusion broken: " + "; ".join(bad))
    text = "\n".join(lines)
    print()
    print(text)
    if a.md:
        with open(a.md, "w") as f:
            f.write("# Lock services: Latchkey against ZooKeeper and etcd (`bench/lock-services.sh`)\n\n")
            f.write(f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; see "
                    "[docs/benchmarks.md](../docs/benchmarks.md#lock-services-zookeeper-and-etcd-benchlock-servicessh) "
                    "for the setup and what the figures mean.\n\n")
            f.write(text + "\n")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("wait")
    p.add_argument("system")
    p.add_argument("addr")
    p = sub.add_parser("worker")
    for n in ("system", "addr", "lock", "counter"):
        p.add_argument(n)
    p.add_argument("cycles", type=int)
    for name in ("holder", "waiter"):
        p = sub.add_parser(name)
        for n in ("system", "addr", "lock"):
            p.add_argument(n)
    p = sub.add_parser("bench")
    for n in ("--zk", "--etcd", "--lk-repl", "--lk", "--workdir", "--pids"):
        p.add_argument(n, required=True)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--cycles", type=int, default=100)
    p.add_argument("--failover-reps", type=int, default=5)
    p.add_argument("--warmup-cycles", type=int, default=100)
    p.add_argument("--md")
    a = ap.parse_args()
    if a.cmd != "bench":
        signal.alarm(WORKER_DEADLINE + 30)  # no worker outlives a stuck run
    if a.cmd == "wait":
        cmd_wait(a.system, a.addr)
    elif a.cmd == "worker":
        cmd_worker(a.system, a.addr, a.lock, a.counter, a.cycles)
    elif a.cmd == "holder":
        cmd_holder(a.system, a.addr, a.lock)
    elif a.cmd == "waiter":
        cmd_waiter(a.system, a.addr, a.lock)
    else:
        sys.exit(cmd_bench(a))


if __name__ == "__main__":
    main()
