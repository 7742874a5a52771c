# shellcheck shell=bash
# own_dir DIR: creates DIR (mode 0755, parents as needed) for the caller, or checks that the DIR
# already there is a directory of the caller's that no one else can write; otherwise prints why
# and returns 1. For the test harness's bases and caches under world-writable /var/tmp, where
# another user could have made the directory first and then swapped what root reads from it.
own_dir() {
  local d=$1 mode
  [[ -e $d || -L $d ]] || { mkdir -p "$d" && chmod 0755 "$d"; } || { echo "own_dir: cannot create $d" >&2; return 1; }
  mode=$(stat -c %a "$d")
  if [[ -L $d || ! -d $d || $(stat -c %u "$d") != "$(id -u)" ]] || ((8#$mode & 8#022)); then
    echo "own_dir: $d is not a directory of $(id -un)'s that only it can write (owner $(stat -c %U "$d"), mode $mode): another user may have made it first; remove it or choose another" >&2
    return 1
  fi
}
