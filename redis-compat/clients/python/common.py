"""What the client-library tests share: a connection, a check that fails
the run, and N processes doing locked increments of one counter that must
end exact."""
import multiprocessing

import redis


def client(port):
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=30)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def increments(port, worker, procs, rounds):
    """Runs `worker(port)` in `procs` processes, each expected to add
    `rounds` to the key "counter" under its lock; checks the total."""
    r = client(port)
    r.delete("counter")
    ps = [multiprocessing.Process(target=worker, args=(port,)) for _ in range(procs)]
    for p in ps:
        p.start()
    for p in ps:
        p.join(300)
        check(p.exitcode == 0, f"worker exit code {p.exitcode}")
    total = int(r.get("counter") or 0)
    check(total == procs * rounds, f"counter {total} != {procs * rounds}")
