#!/usr/bin/env bash
# The native core under AddressSanitizer and UndefinedBehaviorSanitizer: build the extension with both in a copy of
# the working tree (tracked and untracked, not ignored: the checkout's own build is left alone), then run the
# identity tests (tests/test_native_core.py: native against Python core, record for record), the fast-forward tests
# (tests/test_fast_forward.py) and the boundary tests (tests/test_native_boundary.py: every bound method with hostile
# arguments) against it. Any report fails the run (-fno-sanitize-recover, halt_on_error). CPython itself is not
# instrumented: the ASan runtime (and the C++ runtime after it) is preloaded, and leak checking is off (the
# interpreter keeps its allocations).
#
#   scripts/sanitize.sh [extra pytest arguments]      (gcc or clang; about 15 minutes on 2 cores)
#   SANITIZE_TESTS='tests/test_x.py::test_y' scripts/sanitize.sh     (other tests against the instrumented core)
set -euo pipefail
cd "$(dirname "$0")/.."
CXX="${CXX:-c++}"
command -v "$CXX" >/dev/null || { echo "sanitize.sh: no C++ compiler ($CXX)" >&2; exit 2; }
asan="$("$CXX" -print-file-name=libasan.so)"
[ -f "$asan" ] || { echo "sanitize.sh: $CXX has no AddressSanitizer runtime (libasan.so)" >&2; exit 2; }
# the C++ runtime is preloaded too: the interpreter does not link it, and ASan's __cxa_throw interceptor finds no
# real one otherwise (the first exception the core throws would stop the process with an ASan CHECK failure)
stdcxx="$("$CXX" -print-file-name=libstdc++.so)"
[ -f "$stdcxx" ] || stdcxx="libstdc++.so.6"

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
git ls-files -z --cached --others --exclude-standard \
    | while IFS= read -r -d '' f; do if [ -e "$f" ]; then printf '%s\0' "$f"; fi; done \
    | tar --null -T - -cf - | tar -xf - -C "$scratch"
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
echo "== building the native core with $san in $scratch"
(cd "$scratch" && CC="$CXX" CXX="$CXX" CFLAGS="$san" LDFLAGS="$san" python setup.py -q build_ext --inplace) >/dev/null
(cd "$scratch" && LD_PRELOAD="$asan $stdcxx" ASAN_OPTIONS=detect_leaks=0 python -c "import hybridsim.engine.native._core") \
    || { echo "sanitize.sh: the instrumented native core did not build or import" >&2; exit 1; }
echo "== identity, fast-forward and boundary tests against it"
cd "$scratch"
# the reports go to files (pytest captures the tests' stderr, and an abort would lose it), shown if there are any
mkdir "$scratch/reports"
set +e
LD_PRELOAD="$asan $stdcxx" ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:abort_on_error=1:log_path=$scratch/reports/asan" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$scratch/reports/ubsan" OMP_NUM_THREADS=1 \
    HF_HUB_OFFLINE=1 python -m pytest -q -p no:cacheprovider ${SANITIZE_TESTS:-tests/test_native_core.py \
    tests/test_fast_forward.py tests/test_native_boundary.py} "$@"
rc=$?
set -e
if compgen -G "$scratch/reports/*" >/dev/null; then
    echo "== sanitizer reports:" >&2
    cat "$scratch"/reports/* >&2
    exit 1
fi
[ "$rc" -eq 0 ] || { echo "== sanitize.sh: the tests failed (status $rc), no sanitizer report" >&2; exit "$rc"; }
echo "== sanitize.sh: clean"
