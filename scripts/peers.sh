# Shared by scripts/compare-peers and scripts/check-peers (sourced, not run): start minibroker or
# Tansu alone on a loopback port, and wait for it. The caller sets $bin (minibroker), $tansu (a
# Tansu binary), $work (a scratch directory) and $python, and kills $broker_pid when done.

free_port() { "$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() {
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}

# start_minibroker PORT: an in-memory minibroker whose Kafka listener is on PORT.
start_minibroker() {
  local port=$1
  "$bin" serve --listen 127.0.0.1:0 --kafka-listen "127.0.0.1:$port" --partitions 4 \
    >"$work/broker.log" 2>&1 &
  broker_pid=$!
  wait_port "$port"
}

# start_tansu PORT [TOPIC...]: Tansu with its in-memory engine on PORT, with TOPICs of 4
# partitions created.
start_tansu() {
  local port=$1
  shift
  RUST_LOG=warn "$tansu" broker --storage-engine memory://tansu/ \
    --listener-url "tcp://127.0.0.1:$port" --advertised-listener-url "tcp://127.0.0.1:$port" \
    >"$work/broker.log" 2>&1 &
  broker_pid=$!
  wait_port "$port"
  for topic in "$@"; do
    "$tansu" topic create "$topic" --partitions 4 --broker "tcp://127.0.0.1:$port" >/dev/null
  done
}

stop_broker() {
  kill "$broker_pid"
  wait "$broker_pid" 2>/dev/null || true
  broker_pid=
}
