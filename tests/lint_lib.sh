# shellcheck shell=bash
# What the lint tests share: the source tree's files, found anew on every run.

# Every file of the tree under $1, NUL-separated, relative to it: from git when it is a checkout
# (tracked, and untracked but not ignored), else (a source tarball) everything outside .git and
# build directories.
list_files() {
  if git -C "$1" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$1" ls-files -z --cached --others --exclude-standard
  else
    (cd "$1" && find . \( -name .git -o -name 'build*' \) -prune -o -type f -printf '%P\0')
  fi
}

# require_tool NAME TOOL: exits 1, naming the Debian package, when TOOL is not installed.
require_tool() {
  command -v "$2" >/dev/null && return 0
  echo "$1: FAIL: $2 is not installed (apt-get install $2, or tests/install-deps.sh)" >&2
  exit 1
}
