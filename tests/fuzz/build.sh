#!/usr/bin/env bash
# Build the fuzz target over the fake libascendcl's ABI (tests/fuzz/engine_fuzz.c).
#
#   tests/fuzz/build.sh [OUT]        (default OUT: build/fuzz under the repository)
#
# Always, with gcc: OUT/lib-asan (the engine's three libraries built with ASan and
# UBSan) and OUT/driver-asan (the target with tests/fuzz/driver.c as its main()); and
# OUT/lib-ubsan with OUT/driver-ubsan, UBSan alone: the library compiles its fault guard
# (memmove over host ranges a kernel copy proved, os.c) out under ASan, so only this
# build fuzzes the guarded copies.
# OUT/checker-asan: the memory checker's pool segments and freed pinned memory
# (tests/fuzz/checker_fuzz.c), on lib-asan.
# OUT/record-asan: the share record reader alone (tests/fuzz/record_fuzz.c), ASan+UBSan.
# OUT/lines-asan: the trace line formatter alone (tests/fuzz/lines_fuzz.c), ASan+UBSan.
# When clang can link -fsanitize=fuzzer: OUT/lib-fuzzer and OUT/engine_fuzz (libFuzzer,
# ASan and UBSan), OUT/lib-fuzzer-ubsan and OUT/engine_fuzz-ubsan (libFuzzer, UBSan);
# their libraries carry the coverage counters libFuzzer steers by.
#
# Run from an environment where `python -m acl_mem` works (the repository's venv).
# PYTHON overrides the interpreter.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/build/fuzz}
mkdir -p "$out"
out=$(cd "$out" && pwd)
python=${PYTHON:-python}
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
ubsan="-fsanitize=undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
includes=(-I"$root/acl_mem/_fake/src" -I"$root/acl_mem/_fake/include")
cflags=(-std=c11 -Wall -Wextra -Werror -O1 -g)

cd "$root"
# The libraries and the program must share one compiler: each brings its own
# sanitizer runtime, and two runtimes in one process do not work.
build() { # NAME LIBDIR COMPILER FLAGS (for both)
    local name=$1 lib=$2 compiler=$3 flags=$4
    CC=$compiler "$python" -m acl_mem._fake.engine_build "$out/$lib" --flags="$flags"
    # shellcheck disable=SC2086 # $flags is several flags
    "$compiler" "${cflags[@]}" $flags "${includes[@]}" "${@:5}" \
        -L"$out/$lib" -lascendcl -lacl_dvpp -lacl_dvpp_mpi -Wl,-rpath,"$out/$lib" -lm \
        -o "$out/$name"
    echo "built $out/$name"
}
build driver-asan lib-asan gcc "$sanitize" "$here/engine_fuzz.c" "$here/driver.c"
# The checker's segments and freed pinned memory (tests/fuzz/checker_fuzz.c), on lib-asan.
# shellcheck disable=SC2086 # $sanitize is several flags
gcc "${cflags[@]}" $sanitize "${includes[@]}" "$here/checker_fuzz.c" "$here/driver.c" \
    -L"$out/lib-asan" -lascendcl -Wl,-rpath,"$out/lib-asan" -o "$out/checker-asan"
echo "built $out/checker-asan"
# The share record reader alone (tests/fuzz/record_fuzz.c): no library needed.
# shellcheck disable=SC2086 # $sanitize is several flags
gcc "${cflags[@]}" $sanitize "${includes[@]}" "$here/record_fuzz.c" \
    "$root/acl_mem/_fake/src/share_record.c" "$here/driver.c" -o "$out/record-asan"
echo "built $out/record-asan"
# The trace line formatter alone (tests/fuzz/lines_fuzz.c): no library needed.
# shellcheck disable=SC2086 # $sanitize is several flags
gcc "${cflags[@]}" $sanitize "${includes[@]}" "$here/lines_fuzz.c" \
    "$root/acl_mem/_fake/src/trace_lines.c" "$here/driver.c" -o "$out/lines-asan"
echo "built $out/lines-asan"
build driver-ubsan lib-ubsan gcc "$ubsan" "$here/engine_fuzz.c" "$here/driver.c"

probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
    >"$probe/probe.c"
if command -v clang >/dev/null 2>&1 &&
    clang -fsanitize=fuzzer "$probe/probe.c" -o "$probe/probe" >/dev/null 2>&1; then
    # fuzzer-no-link: the libraries get the coverage counters without libFuzzer's main;
    # the program links libFuzzer itself.
    build engine_fuzz lib-fuzzer clang "$sanitize -fsanitize=fuzzer-no-link" \
        -fsanitize=fuzzer "$here/engine_fuzz.c"
    build engine_fuzz-ubsan lib-fuzzer-ubsan clang "$ubsan -fsanitize=fuzzer-no-link" \
        -fsanitize=fuzzer "$here/engine_fuzz.c"
else
    echo "clang with -fsanitize=fuzzer is not available: no libFuzzer binary"
fi
