# Sourced by the bench scripts: loopback port helpers.

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits (up to 5 s) until a server answers PING on 127.0.0.1:$1.
wait_up() {
  local port=$1
  for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "server on port $port did not start" >&2
  exit 1
}

# Sets LK_PORT and RD_PORT to two distinct free ports.
pick_ports() {
  LK_PORT=$(free_port)
  RD_PORT=$(free_port)
  while [ "$RD_PORT" = "$LK_PORT" ]; do RD_PORT=$(free_port); done
}
