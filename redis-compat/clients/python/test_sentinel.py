"""redis-py, unchanged, following Redis Sentinel across a failover:
`Sentinel(...).master_for("mymaster")` writes (each acknowledged only
once `WAIT 1 1000` says a replica has it, so a promoted replica must have
it), then the primary is killed (kill -9), and writes go on through the
same object to the new primary. Every acknowledged write must be there.
Run by sentinel-run.sh, which starts the nodes and sentinels and gives
SENTINEL_PORTS and PRIMARY_PID. Usage: python test_sentinel.py"""
import os
import signal
import time

import redis
from redis.sentinel import Sentinel

from common import check

BEFORE, AFTER = 100, 100


def main():
    ports = [int(p) for p in os.environ["SENTINEL_PORTS"].split()]
    sentinel = Sentinel([("127.0.0.1", p) for p in ports], socket_timeout=0.5)
    master = sentinel.master_for("mymaster", socket_timeout=0.5)
    old = sentinel.discover_master("mymaster")
    acked = {}

    def write(i, deadline):
        """SET then WAIT 1; retried (a new connection through Sentinel)
        until acknowledged or the deadline. True when acknowledged."""
        while time.time() < deadline:
            try:
                master.set(f"k{i}", str(i))
                if master.execute_command("WAIT", 1, 1000) >= 1:
                    acked[f"k{i}"] = str(i)
                    return True
            except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
                pass
            time.sleep(0.01)
        return False

    for i in range(BEFORE):
        check(write(i, time.time() + 10), f"write {i} before the failover")
    os.kill(int(os.environ["PRIMARY_PID"]), signal.SIGKILL)
    start = time.time()
    for i in range(BEFORE, BEFORE + AFTER):
        check(write(i, start + 60), f"write {i} after the failover")
    new = sentinel.discover_master("mymaster")
    check(new != old, f"a new primary: {old} -> {new}")
    r = redis.Redis(host=new[0], port=new[1], socket_timeout=5)
    check(r.execute_command("ROLE")[0] == b"master", "the new primary's ROLE")
    for k, v in acked.items():
        got = r.get(k)
        check(got == v.encode(), f"{k}: acknowledged {v}, found {got}")
    print(f"sentinel: {len(acked)} acknowledged writes all on {new}, failover in "
          f"{time.time() - start:.1f}s (to the last write)")


if __name__ == "__main__":
    main()
