#!/usr/bin/env bash
# Commands over TLS (issue 12's target): redis-benchmark --tls -t set,get
# -c 50 at pipeline 1 and 16 against latchkey (release build, rustls) and
# Debian's redis-server (OpenSSL), both on a tls-port with the same
# certificates (made here with openssl, for this run only) and client
# certificates required, alternating the servers run by run.
#
# Usage: bench/tls.sh      Env: RUNS=3 REQUESTS=200000
# Prints a markdown table; not a test (exits 0 unless a server fails).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-200000}
. bench/ports.sh
bench_setup tls redis-server redis-benchmark redis-cli openssl bc
bench_build latchkey --bin latchkey-server

# A CA, a server certificate for 127.0.0.1 and a client certificate.
(
  cd "$WORK"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 1 -subj "/CN=bench CA"
  openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=127.0.0.1"
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 1 -extfile server.ext
  openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj "/CN=client"
  printf 'extendedKeyUsage=clientAuth\n' >client.ext
  openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out client.crt -days 1 -extfile client.ext
) >/dev/null 2>&1

TLS_ARGS="--tls-cert-file $WORK/server.crt --tls-key-file $WORK/server.key --tls-ca-cert-file $WORK/ca.crt"
pick_ports
LK_TLS=$(free_port)
RD_TLS=$(free_port)
# shellcheck disable=SC2086
LK_EXTRA="--tls-port $LK_TLS $TLS_ARGS" RD_EXTRA="--tls-port $RD_TLS $TLS_ARGS" start_pair

rps() { # tls-port test pipeline -> requests/s
  redis-benchmark -p "$1" --tls --cacert "$WORK/ca.crt" --cert "$WORK/client.crt" \
    --key "$WORK/client.key" -t "$2" -n "$REQUESTS" -c 50 -P "$3" -r 100000 -q 2>/dev/null |
    grep -o '[0-9.]* requests per second' | awk '{print $1}'
}

for p in "$LK_TLS" "$RD_TLS"; do
  [ "$(redis-cli -p "$p" --tls --cacert "$WORK/ca.crt" --cert "$WORK/client.crt" \
    --key "$WORK/client.key" PING)" = PONG ] || { echo "no TLS on port $p" >&2; exit 1; }
done
set_get_table "$LK_TLS" "$RD_TLS"
echo
echo "Machine: $(nproc) cores; redis-benchmark shares them with both servers."
