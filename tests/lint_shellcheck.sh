#!/usr/bin/env bash
# ctest lint_shellcheck (label `lint`): shellcheck over every shell script of the source tree. A script
# is a file named *.sh or *.bats, or one whose first line is a sh/bash/dash/ksh/bats shebang; they are
# found anew on every run (git ls-files, tracked and untracked but not ignored), so a new script is
# covered without registering it. Settings (sourced files are followed): .shellcheckrc at the root.
#
# Usage: lint_shellcheck.sh [SOURCE_DIR]   (default: the checkout holding this script)
set -uo pipefail
root=$(realpath "${1:-$(dirname "$0")/..}")

# shellcheck source=tests/lint_lib.sh
source "$root/tests/lint_lib.sh"
require_tool lint_shellcheck shellcheck

scripts=()
while IFS= read -r -d '' f; do
  [[ -f $root/$f ]] || continue  # deleted but still in the index
  case $f in
    *.sh | *.bats) scripts+=("$f") ;;
    *) head -n1 "$root/$f" 2>/dev/null | grep -qE '^#! *(/usr)?/bin/(env +)?(ba|da|k)?sh|^#!.*\bbats\b' &&
      scripts+=("$f") ;;
  esac
done < <(list_files "$root")

if ((${#scripts[@]} == 0)); then
  echo "lint_shellcheck: FAIL: found no shell script under $root" >&2
  exit 1
fi
cd "$root" || exit 1
# Two at a time (a script and the ones it sources are checked together, so halves cost ~60 % each).
if printf '%s\0' "${scripts[@]}" | xargs -0 -P2 -n $(((${#scripts[@]} + 1) / 2)) shellcheck --color=never; then
  echo "lint_shellcheck: ${#scripts[@]} scripts clean ($(shellcheck --version | sed -n 's/^version: //p'))"
else
  echo "lint_shellcheck: FAIL: shellcheck findings above, in ${#scripts[@]} scripts (fix them, or add a" \
    "targeted '# shellcheck disable=SCxxxx  # reason')" >&2
  exit 1
fi
