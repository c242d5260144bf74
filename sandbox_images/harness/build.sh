#!/usr/bin/env bash
# Builds the harness image without an image registry: a Debian root filesystem
# from debootstrap (through this machine's own apt mirror), imported as the
# base, then the Dockerfile on top. Usage: build.sh [TAG]
set -euo pipefail
tag=${1:-clawloop/harness:latest}
base=clawloop/debian-bookworm:base
here=$(cd "$(dirname "$0")" && pwd)

if ! docker image inspect "$base" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap" >&2; exit 1; }
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [ -n "$mirror" ] || { echo "no Debian mirror found in the apt sources" >&2; exit 1; }
  rootfs=$(mktemp -d)
  trap 'rm -rf "$rootfs"' EXIT
  echo "debootstrap bookworm from $mirror (a few minutes)"
  debootstrap --variant=minbase \
    --include=python3,sqlite3,gawk,procps,less,file,jq,bc,curl,ca-certificates \
    bookworm "$rootfs" "$mirror" >/dev/null
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c . | docker import - "$base" >/dev/null
fi
log=$(DOCKER_BUILDKIT=0 docker build --quiet --network none --build-arg BASE="$base" -t "$tag" "$here" 2>&1) \
  || { echo "$log" >&2; exit 1; }
echo "built $tag"
