#!/usr/bin/env bash
# The Docker engine the container tests use, on a machine without systemd (CI, this sandbox).
#   scripts/docker-engine.sh start   installs docker.io and debootstrap when missing, starts
#                                    dockerd when none answers, and records its pid
#   scripts/docker-engine.sh stop    stops the dockerd that `start` started (none other)
# `start` exits 0 with a line saying why when no engine can run here (not root, no apt): the
# container tests then skip, naming the reason.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
state="$root/build/dockerd"
pid_file="$state/dockerd.pid"

answers() { timeout 10 docker info >/dev/null 2>&1; }

start() {
  if command -v docker >/dev/null && answers; then
    echo "docker-engine: an engine already answers"
    return 0
  fi
  if [ "$(id -u)" -ne 0 ]; then
    echo "docker-engine: not root and no engine answers: the container tests will skip"
    return 0
  fi
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  if [ ${#missing[@]} -gt 0 ]; then
    echo "docker-engine: installing ${missing[*]}"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
             --no-install-recommends "${missing[@]}" >/dev/null; }; then
      echo "docker-engine: could not install ${missing[*]}: the container tests will skip"
      return 0
    fi
  fi
  mkdir -p "$state"
  dockerd >"$state/dockerd.log" 2>&1 &
  echo $! >"$pid_file"
  for _ in $(seq 1 60); do
    if answers; then
      echo "docker-engine: dockerd started (pid $(cat "$pid_file"), log $state/dockerd.log)"
      return 0
    fi
    kill -0 "$(cat "$pid_file")" 2>/dev/null || break
    sleep 0.5
  done
  echo "docker-engine: dockerd did not start (log $state/dockerd.log): the container tests will skip"
  tail -3 "$state/dockerd.log" | sed 's/^/  dockerd: /'
  rm -f "$pid_file"
}

stop() {
  [ -f "$pid_file" ] || return 0
  local pid
  pid="$(cat "$pid_file")"
  rm -f "$pid_file"
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 60); do
    kill -0 "$pid" 2>/dev/null || { echo "docker-engine: dockerd stopped"; return 0; }
    sleep 0.5
  done
  kill -9 "$pid" 2>/dev/null || true
  echo "docker-engine: dockerd killed after 30 s"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
