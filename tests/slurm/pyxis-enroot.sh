#!/usr/bin/env bash
# Builds pyxis and enroot, pinned to a commit each, from their public sources, for the container
# test (e2e/pyxis.sh). Neither is packaged by Debian; both build with Debian's toolchain, the
# Slurm headers and libbsd. Prints the install prefix:
#   PREFIX/lib/slurm/spank_pyxis.so, PREFIX/bin/enroot (+ its helpers), PREFIX/lib/enroot,
#   PREFIX/etc/enroot (the site configuration, which e2e/pyxis.sh completes).
#
# Usage: pyxis-enroot.sh [CACHE_DIR]   (default /var/tmp/fanstore-third-party; a build is reused)
# Exit 77 if the sources cannot be had. They are looked for, in order, in:
#   $FANSTORE_PYXIS_GIT / $FANSTORE_ENROOT_GIT   a git directory (bare or not) holding the commit
#   /work/.mirror/NVIDIA+pyxis/repo, /work/.mirror/NVIDIA+enroot/repo
#   https://github.com/NVIDIA/pyxis and .../enroot  (git clone, if the network allows)
set -euo pipefail
PYXIS_COMMIT=107519944221822ea1dace4db8e7234b2eaa4cd5  # v0.24.0
ENROOT_COMMIT=8ea147d337da60cb1c557140f3a85cdf0d620968  # v4.1.2 and 14 commits (the mirror's head)
CACHE=${1:-/var/tmp/fanstore-third-party}
# shellcheck source=../own_dir.sh
source "$(dirname "${BASH_SOURCE[0]}")/../own_dir.sh"

say() { echo "pyxis-enroot: $*" >&2; }
skip() { say "$* (skipped)"; exit 77; }

# source_tree NAME COMMIT ENVVAR DEST: DEST holds NAME's tree at COMMIT, or the script exits 77.
source_tree() {
  local name=$1 commit=$2 var=$3 dest=$4 g tmp=""
  [[ -e $dest/.fanstore-commit ]] && return 0
  for g in "${!var:-}" "/work/.mirror/NVIDIA+$name/repo" clone; do
    [[ -n $g ]] || continue
    if [[ $g == clone ]]; then
      tmp=$(mktemp -d)
      GIT_TERMINAL_PROMPT=0 timeout 120 git clone -q --bare "https://github.com/NVIDIA/$name" "$tmp/$name.git" 2>/dev/null ||
        { rm -rf "$tmp"; break; }
      g=$tmp/$name.git
    fi
    if git --git-dir="$g" cat-file -e "$commit^{commit}" 2>/dev/null ||
      git -C "$g" cat-file -e "$commit^{commit}" 2>/dev/null; then
      rm -rf "$dest" && mkdir -p "$dest"
      { git --git-dir="$g" archive "$commit" 2>/dev/null || git -C "$g" archive "$commit"; } | tar -x -C "$dest"
      git --git-dir="$g" rev-parse "$commit^{commit}" 2>/dev/null >"$dest/.fanstore-commit" ||
        git -C "$g" rev-parse "$commit^{commit}" >"$dest/.fanstore-commit"
      [[ -n $tmp ]] && rm -rf "$tmp"
      return 0
    fi
    [[ -n $tmp ]] && rm -rf "$tmp"
    tmp=""
  done
  skip "no source of $name at $commit: set $var to a git directory that holds it"
}

# build_pyxis SRC PREFIX DEST
build_pyxis() {
  make -s -C "$1" CC=gcc >/dev/null
  install -D -m 0644 "$1/spank_pyxis.so" "$3$2/lib/slurm/spank_pyxis.so"
}

# build_enroot SRC PREFIX DEST: what enroot's `make install DESTDIR=DEST prefix=PREFIX` does, with glibc
# and Debian's libbsd in place of the static musl and libbsd that its Makefile fetches as git submodules.
build_enroot() {
  local src=$1 final=$2 p=$3$2 u bsd
  bsd=$(pkg-config --cflags --libs libbsd)
  mkdir -p "$p/bin" "$p/lib/enroot" "$p/etc/enroot"/{environ.d,mounts.d,hooks.d,enroot.conf.d} \
    "$p/share/enroot"/{environ.d,mounts.d,hooks.d}
  for u in aufs2ovlfs mksquashovlfs mount switchroot nsenter; do
    # shellcheck disable=SC2086  # $bsd is a list of flags
    gcc -std=gnu99 -O2 -fstack-protector -D_GNU_SOURCE= -include bsd/string.h -o "$p/bin/enroot-$u" "$src/bin/enroot-$u.c" $bsd
  done
  sed -e "s;@sysconfdir@;$final/etc/enroot;" -e "s;@libdir@;$final/lib/enroot;" -e "s;@version@;4.1.2;" \
    "$src/enroot.in" >"$p/bin/enroot"
  chmod 0755 "$p/bin/enroot"
  install -m 0644 "$src"/src/{common,bundle,docker,runtime}.sh "$p/lib/enroot"
  install -m 0644 "$src"/conf/environ/*.env "$p/etc/enroot/environ.d"
  install -m 0644 "$src"/conf/mounts/*.fstab "$p/etc/enroot/mounts.d"
  install -m 0755 "$src"/conf/hooks/*.sh "$p/etc/enroot/hooks.d"
}

main() {
  local p src
  own_dir "$CACHE" || exit 1  # root loads the plugin built here into slurmd, cached or not
  command -v gcc >/dev/null || skip "no gcc"
  command -v make >/dev/null || skip "no make"
  [[ -r /usr/include/slurm/spank.h ]] || skip "no Slurm headers (/usr/include/slurm/spank.h)"
  pkg-config --exists libbsd || skip "libbsd-dev is not installed"
  p=$CACHE/pyxis-${PYXIS_COMMIT:0:8}-enroot-${ENROOT_COMMIT:0:8}
  if [[ -x $p/bin/enroot && -r $p/lib/slurm/spank_pyxis.so ]]; then
    echo "$p"
    return 0
  fi
  mkdir -p "$CACHE/src"
  source_tree pyxis "$PYXIS_COMMIT" FANSTORE_PYXIS_GIT "$CACHE/src/pyxis-$PYXIS_COMMIT"
  source_tree enroot "$ENROOT_COMMIT" FANSTORE_ENROOT_GIT "$CACHE/src/enroot-$ENROOT_COMMIT"
  rm -rf "$p.tmp"
  say "building pyxis ${PYXIS_COMMIT:0:8} and enroot ${ENROOT_COMMIT:0:8} into $p"
  src=$CACHE/src
  if ! { build_pyxis "$src/pyxis-$PYXIS_COMMIT" "$p" "$p.tmp" && build_enroot "$src/enroot-$ENROOT_COMMIT" "$p" "$p.tmp"; } \
    >"$p.log" 2>&1; then
    tail -n 30 "$p.log" >&2
    exit 1
  fi
  mv "$p.tmp$p" "$p"
  rm -rf "$p.tmp"
  echo "$p"
}

main
