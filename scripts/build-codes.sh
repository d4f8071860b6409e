#!/usr/bin/env bash
# Build CODES (with SWM online workloads and the ZeroMQ director client) on ROSS into one prefix, at pinned commits.
#
#   scripts/build-codes.sh --prefix /opt/codes [--jobs N]
#   scripts/build-codes.sh --prefix /opt/codes --ross-src DIR --codes-src DIR --swm-src DIR --argobots-src DIR
#
# Without a --*-src option the component is cloned from its public git repository and checked out at the pinned
# commit (under <prefix>/src). A --*-src folder is used as it is (never modified: it is copied for the autotools
# builds); its git commit, when it has one, is recorded and a difference from the pin is reported.
# Re-runs are incremental: a component whose source, commit and options did not change is not rebuilt (--force
# rebuilds everything). The last line printed is the folder to put in a scenario as backend.codes.bin_dir.
#
# CODES is built from a copy of its source (under <prefix>/build) with hybridsim's patches applied to the copy:
# scripts/codes-patches/NNNN-*.patch, in name order (0001: stand-in traffic for predicted jobs; 0002: their stand-in
# load as a bandwidth share of the routers' ports; docs/codes.md).
# The source folder itself is never patched, so re-runs apply them to a fresh copy again (idempotent); --no-patches
# builds CODES as it is at the pinned commit.
set -euo pipefail

# Pinned versions (the ones hybridsim's CODES bridge was checked against). Override with the environment variables.
CODES_REPO=${CODES_REPO:-https://github.com/codes-org/codes.git}
CODES_COMMIT=${CODES_COMMIT:-a5958cfaee6dcc73a98d084005e3412da773fb35}
ROSS_REPO=${ROSS_REPO:-https://github.com/ROSS-org/ROSS.git}
ROSS_COMMIT=${ROSS_COMMIT:-dc3a6a056cfc7a5e68f7141f88d8833407599ef8}
SWM_REPO=${SWM_REPO:-https://github.com/codes-org/SWM-workloads.git}
SWM_COMMIT=${SWM_COMMIT:-0e7f4eca97303bc38e9d509817933a8b51e6a005}
ARGOBOTS_REPO=${ARGOBOTS_REPO:-https://github.com/pmodels/argobots.git}
ARGOBOTS_COMMIT=${ARGOBOTS_COMMIT:-bffdf56916879f9321a1d7983fa486736cd1d722}

# Debian/Ubuntu packages the build needs: package name -> a file or command that proves it is installed.
DEB_PACKAGES=(build-essential ca-certificates cmake git autoconf automake libtool pkg-config bison flex
              libopenmpi-dev openmpi-bin libzmq3-dev cppzmq-dev rapidjson-dev libboost-dev zlib1g-dev)

usage() {
    cat <<'EOF'
usage: scripts/build-codes.sh [options]

  --prefix DIR         install prefix (default: ./codes-prefix); CODES' executables land in DIR/bin
  --jobs N             parallel make jobs (default: number of cores)
  --codes-src DIR      use this CODES source folder instead of cloning (likewise --ross-src, --swm-src,
  --ross-src DIR         --argobots-src)
  --swm-src DIR
  --argobots-src DIR
  --src-dir DIR        where clones go (default: PREFIX/src)
  --build-type TYPE    CMake build type of ROSS and CODES (default: Release)
  --no-deps            do not install Debian packages (only check for them)
  --force              rebuild every component even if it is up to date
  --no-patches         build CODES without hybridsim's patches (scripts/codes-patches/*.patch; the patched
                       build behaves as the unpatched one unless a run uses a patch's feature, as hybrid runs
                       do by default: backend.codes.standin: replay or load; an unpatched build needs
                       standin: none)
  -h, --help           this help

Pinned commits (override with CODES_COMMIT, ROSS_COMMIT, SWM_COMMIT, ARGOBOTS_COMMIT; repositories with
CODES_REPO, ROSS_REPO, SWM_REPO, ARGOBOTS_REPO):
EOF
    printf '  codes    %s\n  ROSS     %s\n  SWM      %s\n  argobots %s\n' \
        "$CODES_COMMIT" "$ROSS_COMMIT" "$SWM_COMMIT" "$ARGOBOTS_COMMIT"
}

say() { printf '[build-codes] %s\n' "$*" >&2; }
die() { printf '[build-codes] error: %s\n' "$1" >&2; exit "${2:-1}"; }

PREFIX=./codes-prefix
JOBS=$(nproc 2>/dev/null || echo 2)
SRC_DIR=
BUILD_TYPE=Release
INSTALL_DEPS=1
FORCE=0
PATCHES=1
PATCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/codes-patches
declare -A LOCAL_SRC=([codes]= [ross]= [swm]= [argobots]=)

need_arg() { [[ $# -ge 2 && -n "$2" ]] || die "$1 needs a value (see --help)" 2; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --prefix) need_arg "$@"; PREFIX=$2; shift 2 ;;
        --jobs|-j) need_arg "$@"; JOBS=$2; shift 2 ;;
        --codes-src) need_arg "$@"; LOCAL_SRC[codes]=$2; shift 2 ;;
        --ross-src) need_arg "$@"; LOCAL_SRC[ross]=$2; shift 2 ;;
        --swm-src) need_arg "$@"; LOCAL_SRC[swm]=$2; shift 2 ;;
        --argobots-src) need_arg "$@"; LOCAL_SRC[argobots]=$2; shift 2 ;;
        --src-dir) need_arg "$@"; SRC_DIR=$2; shift 2 ;;
        --build-type) need_arg "$@"; BUILD_TYPE=$2; shift 2 ;;
        --no-deps) INSTALL_DEPS=0; shift ;;
        --force) FORCE=1; shift ;;
        --no-patches) PATCHES=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) usage >&2; die "unknown option: $1" 2 ;;
    esac
done
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive integer, got '$JOBS'" 2
[[ $PATCHES -eq 0 || -d "$PATCH_DIR" ]] || die "no CODES patches folder $PATCH_DIR next to this script (copy scripts/codes-patches with it, or build CODES unpatched with --no-patches)" 2

mkdir -p "$PREFIX"
PREFIX=$(cd "$PREFIX" && pwd)
SRC_DIR=${SRC_DIR:-$PREFIX/src}
BUILD_DIR=$PREFIX/build
STAMP_DIR=$PREFIX/.build-stamps
mkdir -p "$SRC_DIR" "$BUILD_DIR" "$STAMP_DIR"
for name in "${!LOCAL_SRC[@]}"; do
    if [[ -n "${LOCAL_SRC[$name]}" ]]; then
        [[ -d "${LOCAL_SRC[$name]}" ]] || die "--$name-src: no such folder: ${LOCAL_SRC[$name]}" 2
        LOCAL_SRC[$name]=$(cd "${LOCAL_SRC[$name]}" && pwd)
    fi
done

# ---------------------------------------------------------------------------------------------------- dependencies
deb_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

check_deps() {
    local missing=()
    if command -v dpkg-query >/dev/null 2>&1; then
        local p
        for p in "${DEB_PACKAGES[@]}"; do deb_installed "$p" || missing+=("$p"); done
        if [[ ${#missing[@]} -gt 0 ]]; then
            if [[ $INSTALL_DEPS -eq 1 && $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
                say "installing Debian packages: ${missing[*]}"
                apt-get update -q
                DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
            else
                die "missing Debian packages: ${missing[*]}
  install them with: sudo apt-get install ${missing[*]}
  (or run this script as root without --no-deps)" 2
            fi
        fi
    fi
    # Not Debian (or packages from elsewhere): check the tools and headers themselves.
    local tool
    local absent=()
    for tool in cc c++ make cmake git autoreconf libtoolize pkg-config bison flex mpicc mpicxx mpirun; do
        command -v "$tool" >/dev/null 2>&1 || absent+=("$tool")
    done
    local hdr
    for hdr in zmq.h zmq.hpp rapidjson/document.h boost/property_tree/ptree.hpp zlib.h; do
        printf '#include <%s>\n' "$hdr" | c++ -x c++ -fsyntax-only - >/dev/null 2>&1 || absent+=("<$hdr>")
    done
    pkg-config --exists libzmq || absent+=("libzmq.pc")
    [[ ${#absent[@]} -eq 0 ]] || die "missing build tools or headers: ${absent[*]}
  on Debian/Ubuntu: apt-get install ${DEB_PACKAGES[*]}" 2
}

# ---------------------------------------------------------------------------------------------------- sources
# src_for NAME REPO COMMIT -> prints the source folder; clones/checks out when no local folder was given.
src_for() {
    local name=$1 repo=$2 commit=$3
    if [[ -n "${LOCAL_SRC[$name]}" ]]; then
        local have
        have=$(git -C "${LOCAL_SRC[$name]}" rev-parse HEAD 2>/dev/null || true)
        if [[ -n "$have" && "$have" != "$commit" ]]; then
            say "note: $name source ${LOCAL_SRC[$name]} is at $have, not the pinned $commit"
        fi
        printf '%s\n' "${LOCAL_SRC[$name]}"
        return
    fi
    local dir=$SRC_DIR/$name
    if [[ ! -d "$dir/.git" ]]; then
        say "cloning $repo into $dir"
        rm -rf "$dir"
        git clone -q "$repo" "$dir" >&2 || die "git clone $repo failed (no network? use --$name-src DIR)"
    fi
    if [[ "$(git -C "$dir" rev-parse HEAD)" != "$commit" ]]; then
        git -C "$dir" cat-file -e "$commit^{commit}" 2>/dev/null || git -C "$dir" fetch -q origin >&2 \
            || die "cannot fetch $repo to get $commit"
        git -C "$dir" -c advice.detachedHead=false checkout -q "$commit" >&2 \
            || die "cannot check out $commit in $dir"
    fi
    printf '%s\n' "$dir"
}

# source_id DIR -> the git commit (plus '+dirty' with uncommitted changes) or, without git, a content digest.
source_id() {
    local dir=$1 id
    if id=$(git -C "$dir" rev-parse HEAD 2>/dev/null) && [[ "$(git -C "$dir" rev-parse --show-toplevel)" == "$dir" ]]; then
        if [[ -n "$(git -C "$dir" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then id="$id+dirty"; fi
        printf '%s\n' "$id"
    else
        (cd "$dir" && find . -type f -not -path './.git/*' -printf '%P %s %T@\n' | sort | md5sum | cut -c1-16)
    fi
}

# copy_tree SRC DEST: a clean copy (without .git) for the autotools builds, which write into their source folder.
copy_tree() {
    rm -rf "$2"
    mkdir -p "$2"
    tar -C "$1" --exclude=.git -cf - . | tar -C "$2" -xf -
}

# up_to_date NAME KEY PRODUCT: the stamp matches and the installed product exists.
up_to_date() {
    [[ $FORCE -eq 0 && -e "$3" && -f "$STAMP_DIR/$1" && "$(cat "$STAMP_DIR/$1")" == "$2" ]]
}

# build LABEL NAME KEY SRC CMD...: run CMD (a function doing the build) with its output in $BUILD_DIR/NAME.log, stop
# with the log's last lines if it fails, else record KEY as NAME's stamp.
build() {
    local label=$1 name=$2 key=$3 src=$4 t0 log=$BUILD_DIR/$2.log
    shift 4
    t0=$(date +%s)
    say "$label: building from $src"
    "$@" >"$log" 2>&1 || die "$label build failed; see $log (last lines:)
$(tail -n 20 "$log")"
    printf '%s\n' "$key" >"$STAMP_DIR/$name"
    say "$label: built in $(( $(date +%s) - t0 )) s"
}

# ---------------------------------------------------------------------------------------------------- components
build_argobots() {
    local src key
    src=$(src_for argobots "$ARGOBOTS_REPO" "$ARGOBOTS_COMMIT")
    printf '%s\n' "$src" >"$STAMP_DIR/argobots.src"
    key="$(source_id "$src") static"
    if up_to_date argobots "$key" "$PREFIX/lib/pkgconfig/argobots.pc"; then say "argobots: up to date"; return; fi
    build argobots argobots "$key" "$src" autotools_build "$src" "$BUILD_DIR/argobots" . autogen.sh
}

build_swm() {
    local src key
    src=$(src_for swm "$SWM_REPO" "$SWM_COMMIT")
    printf '%s\n' "$src" >"$STAMP_DIR/swm.src"
    [[ -f "$src/swm/configure.ac" ]] || die "$src does not look like SWM-workloads (no swm/configure.ac)" 2
    key="$(source_id "$src") static"
    if up_to_date swm "$key" "$PREFIX/lib/pkgconfig/swm.pc"; then say "SWM: up to date"; return; fi
    build SWM swm "$key" "$src" autotools_build "$src" "$BUILD_DIR/swm-workloads" swm prepare.sh
}

# autotools_build SRC BUILD SUBDIR BOOTSTRAP: argobots and SWM (static, MPI compilers) from a clean copy of SRC in
# BUILD (autotools builds write into their source folder), bootstrapped by BOOTSTRAP in BUILD/SUBDIR.
autotools_build() (
    copy_tree "$1" "$2"
    cd "$2/$3" && "./$4" && ./configure --disable-shared --prefix="$PREFIX" CC=mpicc CXX=mpicxx \
        && make -j"$JOBS" && make install
)

build_ross() {
    local src key
    src=$(src_for ross "$ROSS_REPO" "$ROSS_COMMIT")
    printf '%s\n' "$src" >"$STAMP_DIR/ross.src"
    key="$(source_id "$src") $BUILD_TYPE models=off tests=off"
    if up_to_date ross "$key" "$PREFIX/lib/cmake/ROSS/ROSSConfig.cmake" \
        || up_to_date ross "$key" "$PREFIX/lib/ROSSConfig.cmake"; then say "ROSS: up to date"; return; fi
    build ROSS ross "$key" "$src" ross_build "$src" "$BUILD_DIR/ross"
}

# ross_build SRC BUILD
ross_build() (
    rm -rf "$2"
    cmake -S "$1" -B "$2" -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
        -DROSS_BUILD_MODELS=OFF -DROSS_BUILD_TESTING=OFF && cmake --build "$2" -j "$JOBS" && cmake --install "$2"
)

# codes_patches: hybridsim's CODES patches, in the order they are applied (none with --no-patches)
codes_patches() {
    [[ $PATCHES -eq 1 && -d "$PATCH_DIR" ]] || return 0
    find "$PATCH_DIR" -maxdepth 1 -name '[0-9][0-9][0-9][0-9]-*.patch' -type f | LC_ALL=C sort
}

build_codes() {
    local src key patches p pdigest=none
    src=$(src_for codes "$CODES_REPO" "$CODES_COMMIT")
    printf '%s\n' "$src" >"$STAMP_DIR/codes.src"
    patches=$(codes_patches)
    [[ -z "$patches" ]] || pdigest=$(while IFS= read -r p; do cat "$p"; done <<<"$patches" | md5sum | cut -c1-12)
    # CODES links ROSS, SWM and argobots statically: rebuild it when any of them was rebuilt
    key="$(source_id "$src") $BUILD_TYPE swm zeromq patches=$pdigest deps=$(cat "$STAMP_DIR/ross" "$STAMP_DIR/swm" "$STAMP_DIR/argobots" | md5sum | cut -c1-12)"
    if up_to_date codes "$key" "$PREFIX/bin/model-net-mpi-replay"; then say "CODES: up to date"; return; fi
    build CODES codes "$key" "$src" codes_build "$src" "$BUILD_DIR/codes" "$patches"
}

# codes_build SRC BUILD PATCHES: CODES from SRC, or with PATCHES (newline-separated files) from a patched copy of SRC
# in BUILD-src; its output is $BUILD_DIR/codes.log, whose configure summary must show SWM and the ZeroMQ director
# client (without them CODES builds but cannot run SWM jobs or talk to a director)
codes_build() (
    rm -rf "$2"
    local src=$1 p
    if [[ -n "$3" ]]; then
        src=$2-src
        copy_tree "$1" "$src"
        while IFS= read -r p; do
            echo "applying $p"
            patch -d "$src" -p1 --forward --no-backup-if-mismatch -s <"$p" || { echo "patch $p does not apply"; exit 1; }
        done <<<"$3"
    fi
    # SWM and argobots are found through pkg-config under the prefix; ROSS through its CMake package there.
    PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
        cmake -S "$src" -B "$2" -DCMAKE_INSTALL_PREFIX="$PREFIX" -DCMAKE_PREFIX_PATH="$PREFIX" \
        -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DCODES_USE_SWM=ON -DCODES_USE_ZEROMQ=ON -DCODES_USE_TORCH=OFF \
        -DCODES_USE_UNION=OFF -DBUILD_TESTING=OFF \
        && cmake --build "$2" -j "$JOBS" && cmake --install "$2" || exit 1
    grep -q "SWM online workloads enabled" "$BUILD_DIR/codes.log" || { echo "CODES was configured without SWM"; exit 1; }
    grep -q "ZeroMQ director-client/zmqml surrogate enabled" "$BUILD_DIR/codes.log" \
        || { echo "CODES was configured without the ZeroMQ director client"; exit 1; }
)

# ---------------------------------------------------------------------------------------------------- main
# (one function, called with `exit` on the same last line: bash has parsed all of it before the build starts, so
# editing this script during a build cannot change what the running build does)
main() {
    local start
    start=$(date +%s)
    check_deps
    export PATH="$PREFIX/bin:$PATH"
    build_argobots
    build_swm
    build_ross
    build_codes
    [[ -x "$PREFIX/bin/model-net-mpi-replay" ]] || die "no $PREFIX/bin/model-net-mpi-replay after the build"

    local name
    {
        printf '# component, source id and build options, source folder\n'
        for name in codes ross swm argobots; do
            printf '%s\t%s\t%s\n' "$name" "$(cat "$STAMP_DIR/$name")" "$(cat "$STAMP_DIR/$name.src")"
        done
    } >"$PREFIX/VERSIONS.txt"
    say "done in $(( $(date +%s) - start )) s; versions in $PREFIX/VERSIONS.txt:"
    sed 's/^/    /' "$PREFIX/VERSIONS.txt" >&2
    say "put this in a scenario as backend.codes.bin_dir (or export CODES_BIN_DIR=...):"
    printf 'bin_dir: %s\n' "$PREFIX/bin"
}

main; exit "$?"
