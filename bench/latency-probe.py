#!/usr/bin/env python3
"""A client that measures what other clients see: one GET every millisecond on its own
connection, each round trip timed, until it gets SIGTERM or --seconds pass. On exit it
prints the p50, p99 and max round trip in milliseconds and the count: `p50 p99 max n`.
Usage: latency-probe.py PORT [--seconds S]. Standard library only."""
import signal
import socket
import sys
import time

port = int(sys.argv[1])
limit = float(sys.argv[sys.argv.index("--seconds") + 1]) if "--seconds" in sys.argv else 600.0
stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
req = b"*2\r\n$3\r\nGET\r\n$5\r\nprobe\r\n"
rtts = []
end = time.monotonic() + limit
while not stop and time.monotonic() < end:
    t0 = time.monotonic()
    s.sendall(req)
    buf = b""
    while not buf.endswith(b"\r\n"):
        chunk = s.recv(4096)
        if not chunk:
            stop = True
            break
        buf += chunk
    rtts.append((time.monotonic() - t0) * 1000.0)
    time.sleep(0.001)
rtts.sort()
if rtts:
    pick = lambda q: rtts[min(len(rtts) - 1, int(q * len(rtts)))]
    print(f"{pick(0.5):.2f} {pick(0.99):.2f} {rtts[-1]:.2f} {len(rtts)}")
else:
    print("- - - 0")
