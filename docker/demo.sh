#!/usr/bin/env bash
# The compose demo from a fresh clone, with no registry: build the release binary, build a local
# base image holding only its shared libraries, build the minibroker image on it, run the compose
# project (killing the durable broker with SIGKILL mid-run and starting it again) until the
# verifier has spoken, print the report, clean up, and exit with the verifier's status.
set -euo pipefail
cd "$(dirname "$0")/.."

if docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
else
  echo "demo: neither 'docker compose' nor 'docker-compose' is installed" >&2
  exit 1
fi
project=minibroker-demo
run_compose() { "${compose[@]}" -p "$project" -f docker/compose.yaml "$@"; }

echo "== building the release binary"
cargo build --release --locked -p minibroker-cli

stage=target/docker
rm -rf "$stage"
mkdir -p "$stage/base" "$stage/image/acks" "$stage/image/data"
cp target/release/minibroker "$stage/image/minibroker"

echo "== building the base image (the binary's shared libraries only)"
# ldd lists each library as 'name => /path (addr)' or '/path (addr)'; keep the paths.
for lib in $(ldd target/release/minibroker | grep -o '/[^ ]*'); do
  cp --parents -L "$lib" "$stage/base/"
done
tar -C "$stage/base" -c . | docker import - minibroker-base:local >/dev/null

echo "== building the minibroker image"
if ! docker build --quiet -f docker/Dockerfile --build-arg BASE=minibroker-base:local \
  -t minibroker:local "$stage/image" >"$stage/build.log" 2>&1; then
  cat "$stage/build.log" >&2
  exit 1
fi

cleanup() { run_compose down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true; }
trap cleanup EXIT
cleanup

echo "== running broker, flaky-net, 3 producers and the verifier"
run_compose up --detach broker flaky-net producer-1 producer-2 producer-3

echo "== killing the broker with SIGKILL mid-run, then starting it again"
sleep 3
running=0
for producer in producer-1 producer-2 producer-3; do
  if [ "$(docker inspect -f '{{.State.Running}}' "$(run_compose ps -aq "$producer")")" = true ]; then
    running=$((running + 1))
  fi
done
docker kill --signal KILL "$(run_compose ps -aq broker)" >/dev/null
crash_report="broker killed with SIGKILL while $running of 3 producers were running"
echo "$crash_report"
sleep 1
run_compose start broker >/dev/null
# 'up verifier' waits until every producer has completed successfully, then starts it; it fails
# if a producer failed.
verifier_status=1
if run_compose up --detach --no-recreate verifier; then
  verifier_status=$(docker wait "$(run_compose ps -q verifier)")
else
  echo "demo: a producer failed, so the verifier did not run" >&2
fi

echo
echo "== producers"
for producer in producer-1 producer-2 producer-3; do
  run_compose logs --no-color "$producer" 2>/dev/null | grep -E 'produced|error' || true
done
echo
echo "== flaky-net"
run_compose stop flaky-net >/dev/null 2>&1
run_compose logs --no-color flaky-net 2>/dev/null | grep 'proxy faults' || true
echo
echo "== broker crash and recovery"
echo "$crash_report; restarted on the same data volume"
run_compose logs --no-color broker 2>/dev/null \
  | grep -E 'recovered|cut a torn|opened the data directory' | sed 's/^broker[^|]*| //' || true
echo "broker health: $(docker inspect -f '{{.State.Health.Status}}' "$(run_compose ps -aq broker)")"
echo
echo "== verifier"
run_compose logs --no-color verifier 2>/dev/null | grep '|' | sed 's/^verifier[^|]*| //'
echo
echo "== broker shutdown"
started=$(date +%s)
run_compose stop broker >/dev/null 2>&1
echo "broker stopped in $(( $(date +%s) - started ))s (graceful SIGTERM; the grace period is 5s)"
echo "verifier exit status: $verifier_status"
exit "$verifier_status"
