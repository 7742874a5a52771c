#!/usr/bin/env bash
# clang-format over every C++ file of the source tree (*.cc, *.h), with the root's .clang-format.
#   clang_format.sh --check [SOURCE_DIR]   ctest lint_format (label `lint`): fails, showing the
#                                          diff, when a file is not formatted
#   clang_format.sh --fix [SOURCE_DIR]     formats them in place (the build's `format` target)
set -uo pipefail
mode=${1:-}
root=$(realpath "${2:-$(dirname "$0")/..}")
if [[ $mode != --check && $mode != --fix ]]; then
  echo "usage: clang_format.sh --check|--fix [SOURCE_DIR]" >&2
  exit 2
fi
# shellcheck source=tests/lint_lib.sh
source "$root/tests/lint_lib.sh"
require_tool clang_format clang-format

files=()
while IFS= read -r -d '' f; do
  [[ -f $root/$f && ($f == *.cc || $f == *.h) ]] && files+=("$f")
done < <(list_files "$root")
cd "$root" || exit 1
if [[ $mode == --fix ]]; then
  clang-format -i "${files[@]}" && echo "clang_format: ${#files[@]} files formatted"
  exit
fi
bad=()
for f in "${files[@]}"; do
  if ! out=$(clang-format "$f" | diff -u --label "$f" --label "$f (clang-format)" "$f" - 2>&1); then
    bad+=("$f")
    head -n 40 <<<"$out"
  fi
done
if ((${#bad[@]})); then
  echo "clang_format: FAIL: ${#bad[@]} of ${#files[@]} files are not formatted: ${bad[*]}" >&2
  echo "clang_format: run 'cmake --build build --target format' (or tests/clang_format.sh --fix)" >&2
  exit 1
fi
echo "clang_format: ${#files[@]} files clean ($(clang-format --version))"
