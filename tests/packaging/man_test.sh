#!/usr/bin/env bash
# The man pages against the programs: every long option that `fanstore CMD --help` and
# `fanstore-agent --help` list is in the man page (a subcommand's in its own section of
# fanstore(1)), the plugin's options and plugstack.conf keys are in spank_fanstore(8), and every
# page renders without a warning. Usage: man_test.sh BUILD_DIR
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
B=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
M=$B/man
if ! command -v man >/dev/null || [[ ! -f $M/fanstore.1 ]]; then
  echo "SKIP: no man pages in $M (scdoc missing?) or no man"
  exit 77
fi

# long_options: the long options a --help output on stdin lists (lines that start with an
# option), without --help itself.
long_options() {
  grep -oE '^ +(-[A-Za-z0-9], *)?--[a-z0-9][a-z0-9-]*' | grep -oE -- '--[a-z0-9-]+' |
    grep -vx -- '--help' | sort -u
}
# section PAGE NAME: the roff of the .SS NAME subsection of PAGE.
section() { awk -v n="$2" '/^\.S[HS] / { on = ($0 == ".SS " n) } on' "$1"; }
# has OPTION: whether the roff on stdin names OPTION (not merely a longer one it prefixes).
has() { grep -qE -- "$1([^a-z0-9-]|\$)"; }
# expect_options WHAT PAGE ROFF OPTION...: each OPTION is in ROFF, else a failure naming both.
expect_options() {
  local what=$1 page=$2 roff=$3 opt missing=()
  shift 3
  for opt in "$@"; do has "$opt" <<<"$roff" || missing+=("$opt"); done
  if [[ ${#missing[@]} -eq 0 ]]; then
    ok "$what: all $# options are in $page"
  else
    bad "$what: ${missing[*]} missing from $page"
  fi
}

echo "== fanstore(1): every command and every option of its --help"
mapfile -t cmds < <("$B/bin/fanstore" --help |
  awk '/^Commands:/ { on = 1; next } /^$/ { on = 0 } on { print $1 }')
check "fanstore --help lists commands (${cmds[*]})" test "${#cmds[@]}" -ge 8
for cmd in "${cmds[@]}"; do
  roff=$(section "$M/fanstore.1" "$cmd")
  if [[ -z $roff ]]; then
    bad "fanstore $cmd: no section '$cmd' in fanstore.1"
    continue
  fi
  [[ $cmd == version ]] && continue  # no --help of its own
  mapfile -t opts < <("$B/bin/fanstore" "$cmd" --help | long_options)
  expect_options "fanstore $cmd" "fanstore.1 (section $cmd)" "$roff" "${opts[@]}"
done
check "fanstore.1 documents --help and --version" \
  bash -c "grep -q -- '--help' '$M/fanstore.1' && grep -q -- '--version' '$M/fanstore.1'"

echo "== fanstore-agent(8)"
mapfile -t opts < <("$B/bin/fanstore-agent" --help | long_options)
check "fanstore-agent --help lists options" test "${#opts[@]}" -ge 10
expect_options "fanstore-agent" fanstore-agent.8 "$(cat "$M/fanstore-agent.8")" "${opts[@]}" \
  --help --read-entry --read-state

if [[ -f $M/spank_fanstore.8 ]]; then
  echo "== spank_fanstore(8): the options the plugin registers, the keys it accepts"
  mapfile -t opts < <(grep -oE 'const_cast<char ?\*>\("fanstore[a-z-]*"\)' \
    "$SRC/spank-plugin/plugin_state.cc" | grep -oE 'fanstore[a-z-]*' | sed 's/^/--/')
  check "plugin_state.cc registers 7 options" test "${#opts[@]}" -eq 7
  expect_options "spank_fanstore options" spank_fanstore.8 "$(cat "$M/spank_fanstore.8")" \
    "${opts[@]}"
  # The list may be split over several string literals.
  keys=$(sed -n '/kKnownKeys =/,/;/p' "$SRC/spank-plugin/config.cc" | grep -oE '"[^"]*"' | tr -d '"\n')
  IFS=', ' read -r -a keys <<<"$keys"
  check "config.cc knows 13 keys" test "${#keys[@]}" -eq 13
  missing=()
  for k in "${keys[@]}"; do grep -qF "\\fB$k=\\fR" "$M/spank_fanstore.8" || missing+=("$k="); done
  check "spank_fanstore.8 documents every plugstack.conf key${missing:+ (missing: ${missing[*]})}" \
    test "${#missing[@]}" -eq 0
fi

echo "== every page renders without warnings"
for page in "$M"/*.[158]; do
  err=$(MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null)
  lines=$(MANWIDTH=80 man -l "$page" 2>/dev/null | wc -l)
  if [[ -z $err && $lines -gt 20 ]]; then
    ok "$(basename "$page"): $lines lines, no warnings"
  else
    bad "$(basename "$page"): $lines lines; warnings: $err"
  fi
done
finish
