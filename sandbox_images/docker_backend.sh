#!/usr/bin/env bash
# The Docker sandbox backend, ready to use: the engine installed (Debian's
# docker.io) and running, and the harness image built. Idempotent. Run as
# root to install and start the engine; otherwise it checks and says what is
# missing. The engine runs without a bridge or iptables rules: sandbox
# containers get --network none, and nothing here needs a network.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
data_root=${CLAWLOOP_DOCKER_ROOT:-/var/lib/clawloop-docker}
root=$([ "$(id -u)" = 0 ] && echo yes || echo no)

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  [ "$root" = yes ] || { echo "Docker backend: install docker.io and debootstrap (as root)" >&2; exit 1; }
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  [ "$root" = yes ] || { echo "Docker backend: the engine is not running and only root can start it" >&2; exit 1; }
  mkdir -p "$data_root"
  setsid nohup dockerd --data-root "$data_root" --bridge none --iptables=false --ip-masq=false \
    >"$data_root.log" 2>&1 < /dev/null &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see $data_root.log" >&2; exit 1; }
fi

"$here/harness/build.sh"
