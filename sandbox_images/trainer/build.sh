#!/usr/bin/env bash
# Builds the trainer image. Usage: build.sh [TAG]  (default clawloop/trainer:latest)
#
# Where a registry is reachable (a GPU build host), FROM python:3.11-slim-bookworm
# (or $TRAINER_BASE, local or pulled) with the dependencies from PyPI: the CUDA
# torch. Where none is (here), or with TRAINER_OFFLINE=1, FROM the debootstrap
# Debian base the harness build imports, with every dependency from a wheelhouse
# the host pip fills (whatever torch it resolves: here the CPU wheel on this
# disk), built with --network none. The wheelhouse is cached in
# $CLAWLOOP_HOME/trainer-wheels and refilled when requirements.txt changes.
set -euo pipefail
tag=${1:-clawloop/trainer:latest}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
registry_base=${TRAINER_BASE:-python:3.11-slim-bookworm}
local_base=clawloop/debian-bookworm:base
wheels=${CLAWLOOP_TRAINER_WHEELS:-${CLAWLOOP_HOME:-$HOME/.clawloop}/trainer-wheels}
read -r -a pip <<<"${PIP:-python3 -m pip}"

docker info >/dev/null 2>&1 || { echo "the Docker engine is not running: make docker-backend (as root)" >&2; exit 1; }

# The build context holds only what the image needs (not .venv or the state).
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$here/Dockerfile" "$here/requirements.txt" "$ctx/"
tar -C "$repo" --exclude=__pycache__ -c resources training_jobs | tar -C "$ctx" -x
mkdir "$ctx/wheels"

if [ -n "${TRAINER_BASE:-}" ] && [ -z "${TRAINER_OFFLINE:-}" ]; then
  docker image inspect "$TRAINER_BASE" >/dev/null 2>&1 || docker pull -q "$TRAINER_BASE" >/dev/null \
    || { echo "TRAINER_BASE=$TRAINER_BASE is neither on this engine nor pullable" >&2; exit 1; }
  mode=index
elif [ -z "${TRAINER_OFFLINE:-}" ] && docker pull -q "$registry_base" >/dev/null 2>&1; then
  mode=index
else
  mode=wheelhouse
fi

if [ "$mode" = index ]; then
  base=$registry_base network=default
  echo "building $tag from $base, dependencies from the package index"
else
  docker image inspect "$local_base" >/dev/null 2>&1 || "$here/../harness/build.sh" >/dev/null
  want=$(sha256sum "$here/requirements.txt" | cut -d' ' -f1)
  if [ "$(cat "$wheels/.requirements.sha256" 2>/dev/null)" != "$want" ]; then
    echo "filling the wheelhouse $wheels"
    mkdir -p "$wheels" && rm -f "$wheels"/*.whl
    # Python 3.11 to match bookworm's python3; binary wheels only, so nothing
    # compiles in the image. pip itself too: the base has none.
    "${pip[@]}" download --quiet --disable-pip-version-check --only-binary=:all: --python-version 3.11 \
      --dest "$wheels" -r "$here/requirements.txt" pip 2> >(grep -v 'is ignored: it is neither' >&2)
    echo "$want" >"$wheels/.requirements.sha256"
  fi
  # Hard links: no copy of the 240 MB wheelhouse when it shares a filesystem with /tmp.
  cp -al "$wheels/." "$ctx/wheels/" 2>/dev/null || cp -a "$wheels/." "$ctx/wheels/"
  base=$local_base network=none
  echo "building $tag from $base, dependencies from the wheelhouse, no network"
fi

log=$(DOCKER_BUILDKIT=0 docker build --quiet --network "$network" --build-arg BASE="$base" -t "$tag" "$ctx" 2>&1) \
  || { echo "$log" >&2; exit 1; }
echo "built $tag"
