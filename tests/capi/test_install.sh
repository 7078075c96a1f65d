#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The installed library, as its users see it: `meson install --destdir STAGE`, then
#  - the files: libtensorfetch.so.0 (soname) and its links, headers, tensorfetch.pc, the CLI,
#    the man page (renders without warnings, documents every option of every --help);
#  - the exports: only the public API, nothing of tensorfetch::detail, simdjson, nlohmann, curl;
#  - tools/examples/list_tensors.c built as plain C with nothing but pkg-config's flags, run on
#    the reference checkpoints; the C examples of README.md and docs/ built the same way;
#  - a C++20 consumer of the public C++ headers, built and run the same way.
# Environment (tests/capi/meson.build): MESON BUILD_ROOT SOURCE_ROOT INSTALL_{BIN,LIB,INCLUDE,MAN}DIR
# PROJECT_VERSION CC CXX CONSUMER_FLAGS TENSORFETCH_REFERENCE_DIR.
set -euo pipefail

failures=0
checks=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  checks=$((checks + 1))
  if ! "$@"; then
    echo "FAIL: $what" >&2
    failures=$((failures + 1))
  fi
}
die() {
  echo "FAIL: $*" >&2
  exit 1
}

work=$(mktemp -d "${TMPDIR:-/tmp}/tensorfetch-install-XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/stage
ref=$TENSORFETCH_REFERENCE_DIR

"$MESON" install -C "$BUILD_ROOT" --no-rebuild --destdir "$stage" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log" >&2; die "meson install --destdir failed"; }

libdir=$stage$INSTALL_LIBDIR
incdir=$stage$INSTALL_INCLUDEDIR
bindir=$stage$INSTALL_BINDIR
mandir=$stage$INSTALL_MANDIR
so=$libdir/libtensorfetch.so.$PROJECT_VERSION

# --- files -----------------------------------------------------------------------------------
check "shared library $so installed" test -f "$so"
[ -f "$so" ] || die "no library to test"
check "libtensorfetch.so.0 -> libtensorfetch.so.$PROJECT_VERSION" \
  test "$(readlink "$libdir/libtensorfetch.so.0")" = "libtensorfetch.so.$PROJECT_VERSION"
check "libtensorfetch.so (development link) installed" test -L "$libdir/libtensorfetch.so"
check "no static library installed" test ! -e "$libdir/libtensorfetch.a"
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
check "SONAME is libtensorfetch.so.0 (got '$soname')" test "$soname" = "libtensorfetch.so.0"
check "tensorfetch.pc installed" test -f "$libdir/pkgconfig/tensorfetch.pc"
check "the CLI installed" test -x "$bindir/tensorfetch"
check "the man page installed" test -f "$mandir/man1/tensorfetch.1"

# Every public header, and nothing else, under include/tensorfetch/.
(cd "$SOURCE_ROOT/include/tensorfetch" && ls) >"$work/headers.src"
(cd "$incdir/tensorfetch" && ls) >"$work/headers.installed" || true
check "installed headers equal include/tensorfetch/ ($(diff "$work/headers.src" "$work/headers.installed" | tr '\n' ' '))" \
  cmp -s "$work/headers.src" "$work/headers.installed"

# --- exports ---------------------------------------------------------------------------------
nm -D --defined-only --demangle "$so" >"$work/exports"
exported=$(grep -vc ' A ' "$work/exports" || true)  # not counting the version node
echo "libtensorfetch.so exports $exported symbols" \
  "($(grep -c ' T tf_' "$work/exports" || true) C functions)"
grep -E 'tensorfetch::detail|simdjson|nlohmann|curl|Curl|CURL' "$work/exports" >"$work/leaks" || true
check "no private symbol exported: $(head -5 "$work/leaks" | tr '\n' ';')" test ! -s "$work/leaks"
for sym in tf_open tf_close tf_fetch tf_cancel tf_tensor_data tf_error_message tf_plan_fetch tf_plan_free tf_select_for_rank \
  tf_publish_to_hf_cache tf_commit \
  'tensorfetch::Checkpoint::open(' 'tensorfetch::Checkpoint::view(' 'tensorfetch::parse_header(' \
  'tensorfetch::cache_list(' 'tensorfetch::version()'; do
  check "exported: $sym" grep -qF "$sym" "$work/exports"
done

# --- pkg-config ------------------------------------------------------------------------------
export PKG_CONFIG_PATH=$libdir/pkgconfig
export PKG_CONFIG_SYSROOT_DIR=$stage
export PKG_CONFIG_ALLOW_SYSTEM_CFLAGS=1 PKG_CONFIG_ALLOW_SYSTEM_LIBS=1
check "pkg-config --modversion tensorfetch = $PROJECT_VERSION" \
  test "$(pkg-config --modversion tensorfetch)" = "$PROJECT_VERSION"
flags=$(pkg-config --cflags --libs tensorfetch)
echo "pkg-config --cflags --libs tensorfetch: $flags"
# tl-expected, which every public C++ header includes: required when pkg-config knows it, else
# (Debian: a CMake package only) named in the .pc's requires_header; either way every Requires
# resolves, so `pkg-config tensorfetch` itself works.
check "pkg-config resolves every Requires of tensorfetch.pc" pkg-config --exists --print-errors tensorfetch
pc_requires=$(pkg-config --print-requires tensorfetch)
if pkg-config --exists tl-expected; then
  check "tensorfetch.pc requires tl-expected (Requires: '$pc_requires')" grep -q '^tl-expected' <<<"$pc_requires"
else
  check "tensorfetch.pc requires no package pkg-config lacks (Requires: '$pc_requires')" test -z "$pc_requires"
  check "tensorfetch.pc names tl/expected.hpp in requires_header" \
    grep -qF 'tl/expected.hpp' <<<"$(pkg-config --variable=requires_header tensorfetch)"
fi
check "tensorfetch.pc's description names tl-expected" grep -q '^Description:.*tl-expected' "$libdir/pkgconfig/tensorfetch.pc"

# --- the C example, built as a user builds it -------------------------------------------------
# shellcheck disable=SC2086  # flags and compilers are word lists
$CC ${CONSUMER_FLAGS:-} -std=c99 -Wall -Wextra -Wpedantic -Werror "$SOURCE_ROOT/tools/examples/list_tensors.c" $flags \
  -o "$work/list_tensors" || die "tools/examples/list_tensors.c does not build against the staged library"
check "list_tensors needs libtensorfetch.so.0" \
  bash -c "readelf -d '$work/list_tensors' | grep -q 'NEEDED.*\[libtensorfetch.so.0\]'"
check "list_tensors loads the staged library" \
  bash -c "LD_LIBRARY_PATH='$libdir' ldd '$work/list_tensors' | grep -qF '$libdir/libtensorfetch.so.0'"
export LD_LIBRARY_PATH=$libdir

index=$ref/llama-tiny-sharded/model.safetensors.index.json
"$work/list_tensors" "$ref/llama-tiny-sharded" >"$work/sharded.out" || die "list_tensors failed on llama-tiny-sharded"
tensors=$(grep -c '"[^"]*": "model-[0-9]*-of-[0-9]*\.safetensors"' "$index")
check "list_tensors prints one line per tensor ($tensors) and a summary" \
  test "$(wc -l <"$work/sharded.out")" -eq $((tensors + 1))
check "summary line" \
  grep -qx "$tensors tensors in 3 file(s) (tensorfetch $PROJECT_VERSION)" "$work/sharded.out"
check "lm_head.weight line" \
  grep -qxF "$(printf 'lm_head.weight\tBF16\t[1200, 64]\tmodel-00003-of-00003.safetensors')" "$work/sharded.out"
# Every tensor in the shard the index names.
mismatched=0
while IFS=$'\t' read -r name _dtype _shape shard; do
  [ -n "$shard" ] || continue
  grep -qF "\"$name\": \"$shard\"" "$index" || { echo "  $name: $shard" >&2; mismatched=$((mismatched + 1)); }
done <"$work/sharded.out"
check "every tensor's shard agrees with the index" test "$mismatched" -eq 0

"$work/list_tensors" "$ref/dtypes/model.safetensors" >"$work/dtypes.out" || die "list_tensors failed on dtypes"
check "scalar shape printed as []" grep -qxF "$(printf 'scalar\tF32\t[]\tmodel.safetensors')" "$work/dtypes.out"
check "empty tensor" grep -qxF "$(printf 'empty\tF32\t[0, 7]\tmodel.safetensors')" "$work/dtypes.out"
check "F8 dtype" grep -qxF "$(printf 'f8e4m3\tF8_E4M3\t[2, 3, 4]\tmodel.safetensors')" "$work/dtypes.out"

# An error: exit code 1 (NotFound) and a message naming the path.
set +e
"$work/list_tensors" "$work/missing.safetensors" >/dev/null 2>"$work/missing.err"
rc=$?
set -e
check "missing file: exit 1 (got $rc)" test "$rc" -eq 1
check "missing file: message names the path and the code" \
  bash -c "grep -qF '$work/missing.safetensors' '$work/missing.err' && grep -qF NotFound '$work/missing.err'"

# The C examples of README.md and docs/*.md: every ```c block marked `<!-- doctest: compile -->`
# (docs/development.md, "Tested documentation") builds the same way (they are not run: they open
# a Hub repo). The docs suite checks that every c block is marked.
c_examples=0
for doc in "$SOURCE_ROOT/README.md" "$SOURCE_ROOT"/docs/*.md; do
  [ -f "$doc" ] || continue
  # Each marked block to its own file: NAME.LINE.c
  awk -v out="$work/doc_example" -v name="$(basename "$doc" .md)" '
    /^<!-- *doctest: *compile *--> *$/ { marked = 1; next }
    marked && /^```c *$/ { file = out "." name "." NR ".c"; in_code = 1; marked = 0; next }
    in_code && /^```/ { in_code = 0; next }
    in_code { print > file; next }
    /^[[:space:]]*$/ { next }
    { marked = 0 }' "$doc"
done
for example in "$work"/doc_example.*.c; do
  [ -f "$example" ] || continue
  c_examples=$((c_examples + 1))
  where=${example#"$work"/doc_example.}
  # shellcheck disable=SC2086
  check "the C example $where (docs) builds against the staged library" \
    $CC ${CONSUMER_FLAGS:-} -std=c99 -Wall -Wextra -Wpedantic -Werror "$example" $flags -o "$example.bin"
done
check "README.md and docs/ have C examples marked doctest: compile (found $c_examples)" test "$c_examples" -ge 2
check "README.md has a C example" bash -c "ls '$work'/doc_example.README.*.c >/dev/null 2>&1"

# --- a C++ consumer of the public C++ headers ---------------------------------------------------
# shellcheck disable=SC2086
$CXX ${CONSUMER_FLAGS:-} -std=c++20 -Wall -Wextra -Wpedantic -Werror "$SOURCE_ROOT/tests/capi/consumer.cc" $flags \
  -o "$work/consumer" || die "a C++ consumer does not build against the staged headers and library"
out=$("$work/consumer" "$ref/llama-tiny-single" 2>&1) || { echo "$out" >&2; die "the C++ consumer failed"; }
check "C++ consumer output ($out)" test "$out" = "ok $tensors tensors, 9 selected, C and C++ bytes agree"

# --- the CLI and its man page --------------------------------------------------------------------
check "installed CLI runs" test "$("$bindir/tensorfetch" --version)" = "tensorfetch $PROJECT_VERSION"
man_page=$mandir/man1/tensorfetch.1
if command -v groff >/dev/null; then
  groff -man -Tutf8 -ww -z "$man_page" 2>"$work/groff.err" || true
  check "man page renders without warnings: $(head -3 "$work/groff.err" | tr '\n' ' ')" test ! -s "$work/groff.err"
fi
sed 's/\\-/-/g; s/\\f[BIRP]//g' "$man_page" >"$work/man.txt"
for cmd in "" inspect get download cache "cache ls" "cache verify" "cache rm" "cache prune"; do
  # shellcheck disable=SC2086
  "$bindir/tensorfetch" $cmd --help >"$work/help.txt" 2>&1 || true
  while read -r opt; do
    check "man page documents '$cmd $opt'" grep -qF -- "$opt" "$work/man.txt"
  done < <(grep -oE -- '--[a-z][a-z-]*' "$work/help.txt" | sort -u)
done
for word in inspect get download "cache ls" "cache verify" "cache rm" "cache prune" TENSORFETCH_CACHE \
  HF_ENDPOINT HF_TOKEN HF_HOME HF_HUB_CACHE HF_HUB_OFFLINE CURL_CA_BUNDLE "EXIT STATUS"; do
  check "man page mentions $word" grep -qF "$word" "$work/man.txt"
done

echo "$checks checks, $failures failed"
[ "$failures" -eq 0 ]
