#!/usr/bin/env bash
# Build both Docker images with buildah (no daemon) and run each image's quickstart; outside CI (minutes, network).
#
#   bash scripts/build-images.sh [--debootstrap] [--only hybridsim|codes] [--torch-index URL] [--pip-index URL]
#
# --debootstrap   make the Dockerfiles' base image (python:3.11-slim-bookworm) locally from Debian bookworm's packages
#                 with debootstrap (bookworm's Python is 3.11) instead of pulling it from a registry; buildah then
#                 builds FROM that local image (--pull=never)
# --only NAME     build only docker/Dockerfile (hybridsim) or docker/Dockerfile.codes (codes: clones CODES and ROSS
#                 from GitHub while building)
# --torch-index   the index pip takes torch from (default: the Dockerfiles' TORCH_INDEX, PyTorch's CPU-only wheels)
# --pip-index     the index pip takes every package from (a mirror; also torch's unless --torch-index is given)
#
# Needs: buildah (apt-get install buildah), and for --debootstrap debootstrap; run as root (or under `buildah unshare`).
# Each built image runs its default command (the quickstart) once; the script stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=python:3.11-slim-bookworm
only="" debootstrap=0 torch_index="" pip_index=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --debootstrap) debootstrap=1 ;;
        --only) only="$2"; shift ;;
        --torch-index) torch_index="$2"; shift ;;
        --pip-index) pip_index="$2"; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "build-images: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
command -v buildah >/dev/null || { echo "build-images: buildah not found (apt-get install buildah)" >&2; exit 2; }

pull=()
if [[ $debootstrap -eq 1 ]] && buildah inspect --type image "$BASE" >/dev/null 2>&1; then
    echo "== base image $BASE: already here (buildah rmi $BASE to make it again)"
    pull=(--pull=never)
elif [[ $debootstrap -eq 1 ]]; then
    command -v debootstrap >/dev/null || { echo "build-images: debootstrap not found (apt-get install debootstrap)" >&2; exit 2; }
    echo "== base image $BASE from Debian bookworm (debootstrap)"
    ctr=$(buildah from scratch)
    root=$(buildah mount "$ctr")
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python3-dev,ca-certificates \
        bookworm "$root" http://deb.debian.org/debian
    # what the python image offers: `python` and `pip` on PATH, pip allowed to install into the system Python
    ln -sf python3 "$root/usr/bin/python"
    rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
    rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"*
    buildah umount "$ctr"
    buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$ctr"
    buildah commit --rm "$ctr" "$BASE"
    pull=(--pull=never)
fi

args=("${pull[@]}")
[[ -n "$pip_index" ]] && args+=(--build-arg "PIP_INDEX_URL=$pip_index") && torch_index="${torch_index:-$pip_index}"
[[ -n "$torch_index" ]] && args+=(--build-arg "TORCH_INDEX=$torch_index")

quickstart() {  # IMAGE: the image's default command (the quickstart) in a throw-away container
    local c
    c=$(buildah from "${pull[@]}" "$1")
    buildah run "$c" -- hybridsim run /opt/hybridsim/examples/quickstart.yaml -o /tmp/quickstart --no-progress
    buildah run "$c" -- sh -c 'test -s /tmp/quickstart/summary.json && echo "quickstart in $0: ok"' "$1"
    buildah rm "$c" >/dev/null
}

if [[ -z "$only" || "$only" == hybridsim ]]; then
    echo "== hybridsim (docker/Dockerfile)"
    buildah bud --layers "${args[@]}" -f docker/Dockerfile -t hybridsim .
    quickstart hybridsim
fi
if [[ -z "$only" || "$only" == codes ]]; then
    echo "== hybridsim-codes (docker/Dockerfile.codes)"
    buildah bud --layers "${args[@]}" -f docker/Dockerfile.codes -t hybridsim-codes .
    quickstart hybridsim-codes
fi
