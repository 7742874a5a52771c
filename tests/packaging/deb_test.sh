#!/usr/bin/env bash
# The Debian packages as a site gets them: `cpack -G DEB` from the build, then dpkg -i of all
# three, the files where they belong, the installed commands and man pages working, and dpkg -r
# and dpkg -P leaving nothing behind. Needs root; the machine ends as it began: when a FanStore
# package (or an unowned plugstack line) is there before, only the packages are checked and the
# install is skipped, since removing would take it away. Usage: deb_test.sh BUILD_DIR
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
B=$(cd "$1" && pwd)
PKGS=("${FANSTORE_PKGS[@]}")
CONF=$FANSTORE_CONF
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: dpkg -i needs root"
  exit 77
fi
for tool in cpack dpkg dpkg-deb dpkg-query man; do
  command -v "$tool" >/dev/null || { echo "SKIP: no $tool"; exit 77; }
done
PLUGIN_DIR=$(sed -n 's/^FANSTORE_SLURM_PLUGIN_DIR:PATH=//p' "$B/CMakeCache.txt")
VERSION=$("$B/bin/fanstore" --version | awk '{ print $2 }')

T=$(mktmp)
DPKG_LOG=$T/dpkg.log
INSTALLED_HERE=0
cleanup() {
  if [[ $INSTALLED_HERE -eq 1 ]]; then
    local p
    for p in "${PKGS[@]}"; do pkg_known "$p" && purge_debs "$p"; done
  fi
  rm -rf "$T"
}
trap cleanup EXIT

echo "== cpack -G DEB"
if ! build_debs "$B" "$T/out"; then
  bad "cpack -G DEB fails"
  finish
  exit 1
fi
for p in "${PKGS[@]}"; do
  size=$(du -h "${DEB[$p]:-/dev/null}" | cut -f1)
  check "package $p built ($(basename "${DEB[$p]:-none}"), $size)" test -f "${DEB[$p]}"
done
[[ $FAILURES -eq 0 ]] || { finish; exit 1; }
for p in "${PKGS[@]}"; do
  check "$p has version $VERSION" test "$(dpkg-deb -f "${DEB[$p]}" Version)" = "$VERSION"
done

echo "== dependencies: every library the binaries link comes from a package they depend on"
# depends_on DEPENDS PKG: whether the Depends field DEPENDS names PKG (in any alternative).
depends_on() { sed -E 's/ *\([^)]*\)//g; s/ *[,|] */\n/g' <<<"$1" | grep -qxF -- "$2"; }
for p in "${PKGS[@]}"; do
  x=$T/x-$p
  dpkg-deb -x "${DEB[$p]}" "$x"
  depends=$(dpkg-deb -f "${DEB[$p]}" Depends)
  echo "  $p: Depends: $depends"
  missing=()
  while read -r elf; do
    # The libraries it links directly (NEEDED), where the loader finds them: theirs are
    # their own packages' business.
    while read -r lib; do
      path=$(ldd "$elf" | awk -v l="$lib" '$1 == l && $3 ~ /^\// { print $3 }')
      [[ -z $path ]] && continue
      owner=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -1 | cut -d: -f1)
      [[ -n $owner ]] && ! depends_on "$depends" "$owner" && missing+=("$owner ($lib)")
    done < <(objdump -p "$elf" | awk '$1 == "NEEDED" { print $2 }')
  done < <(find "$x" -type f \( -perm -u+x -o -name '*.so' \))
  check "$p depends on the package of every library it links${missing:+ (missing: ${missing[*]})}" \
    test ${#missing[@]} -eq 0
done
tools_deps=$(dpkg-deb -f "${DEB[fanstore]}" Depends)
# (xxHash is compiled in, XXH_INLINE_ALL: no libxxhash0.)
for dep in libpmix2 libmunge2 libsodium23 libzstd1; do
  check "fanstore (the agent) depends on $dep" depends_on "$tools_deps" "$dep"
done
spank_deps=$(dpkg-deb -f "${DEB[fanstore-spank]}" Depends)
for dep in "fanstore (= $VERSION)" "fanstore-preload (= $VERSION)" "slurm-client (>= " \
  libpmix-dev; do
  check "fanstore-spank depends on $dep" grep -qF -- "$dep" <<<"$spank_deps"
done
check "fanstore-spank marks $CONF a conffile" \
  grep -qx "$CONF" <<<"$(dpkg-deb -I "${DEB[fanstore-spank]}" conffiles)"

pre=()
for p in "${PKGS[@]}"; do pkg_known "$p" && pre+=("$p ($(pkg_state "$p"))"); done
if [[ ${#pre[@]} -gt 0 ]] || { [[ -e $CONF ]] && ! dpkg -S "$CONF" >/dev/null 2>&1; }; then
  echo "SKIP: install and remove not tried: ${pre[*]:-$CONF, not from a package,} already here"
  finish || exit 1
  exit 77
fi

echo "== dpkg -i"
INSTALLED_HERE=1
if ! install_debs; then
  indent "  " <"$T/dpkg.log"
  bad "dpkg -i of the three packages fails"
  finish
  exit 1
fi
for p in "${PKGS[@]}"; do
  check "$p is installed" test "$(pkg_state "$p")" = ii
  dpkg -L "$p" >"$T/$p.list"
done
# installed PKG PATH: PKG's file list names PATH and PATH is there.
installed() { grep -qx "$2" "$T/$1.list" && [[ -e $2 ]]; }
check "fanstore: /usr/bin/fanstore" installed fanstore /usr/bin/fanstore
check "fanstore: /usr/bin/fanstore-agent" installed fanstore /usr/bin/fanstore-agent
for page in man1/fanstore.1 man5/fanstore.fs.5 man8/fanstore-agent.8; do
  check "fanstore: /usr/share/man/$page.gz" installed fanstore "/usr/share/man/$page.gz"
done
preload=$(grep '/libfanstore_preload\.so$' "$T/fanstore-preload.list")
check "fanstore-preload: $preload" installed fanstore-preload "$preload"
check "fanstore-spank: $PLUGIN_DIR/spank_fanstore.so" \
  installed fanstore-spank "$PLUGIN_DIR/spank_fanstore.so"
check "fanstore-spank: /usr/share/man/man8/spank_fanstore.8.gz" \
  installed fanstore-spank /usr/share/man/man8/spank_fanstore.8.gz
check "fanstore-spank: $CONF" installed fanstore-spank "$CONF"
line=$(grep -v '^[[:space:]]*\(#\|$\)' "$CONF")
echo "  $CONF: $line"
one_line() {
  [[ $(wc -l <<<"$line") -eq 1 && $line == "required $PLUGIN_DIR/spank_fanstore.so "* ]]
}
check "$CONF holds one line: required $PLUGIN_DIR/spank_fanstore.so" one_line
check "its agent= is the installed agent" grep -q ' agent=/usr/bin/fanstore-agent\b' <<<"$line"
check "its preload= is the installed library" grep -q " preload=$preload\b" <<<"$line"
check "dpkg knows $CONF as a conffile" \
  grep -q "$CONF" <<<"$(dpkg-query -W -f '${Conffiles}' fanstore-spank)"

echo "== the installed commands"
check "fanstore --version from /usr/bin: fanstore $VERSION" \
  bash -c "/usr/bin/fanstore --version | grep -q '^fanstore $VERSION '"
check "fanstore --help from /usr/bin" \
  bash -c "/usr/bin/fanstore --help | grep -q '^Usage: fanstore'"
check "fanstore-agent --help from /usr/bin" \
  bash -c "/usr/bin/fanstore-agent --help | grep -q '^Usage: fanstore-agent'"
mkdir -p "$T/tree/d" && echo "served by the installed packages" >"$T/tree/d/hello.txt"
check "fanstore pack (installed)" /usr/bin/fanstore pack -q "$T/tree" "$T/ds.fs"
out=$(env -u FANSTORE_AGENT -u FANSTORE_PRELOAD /usr/bin/fanstore run --local-dir "$T" \
  --mount /fanstore/pkgtest "$T/ds.fs" -- cat /fanstore/pkgtest/d/hello.txt 2>&1)
check "fanstore run (installed agent and library) serves the dataset" \
  test "$out" = "served by the installed packages"
for page in fanstore fanstore-agent spank_fanstore "5 fanstore.fs"; do
  # shellcheck disable=SC2086  # "5 fanstore.fs": section and page
  check "man -w $page: $(man -w $page 2>&1)" bash -c "man -w $page | grep -q '^/usr/share/man/'"
done

echo "== Slurm loads the packaged plugin through Debian's plugstack.conf and the conffile"
# A slurm.conf of its own (sbatch --help and the submit check need no slurmctld), so that the
# test cluster's configuration is neither used nor touched.
printf 'ClusterName=pkgtest\nSlurmctldHost=localhost\nPlugStackConfig=/etc/slurm/plugstack.conf\n' \
  >"$T/slurm.conf"
help=$(SLURM_CONF=$T/slurm.conf sbatch --help 2>&1)
check "sbatch --help lists --fanstore" grep -q -- '--fanstore=PATH' <<<"$help"
err=$(SLURM_CONF=$T/slurm.conf sbatch --fanstore="$T/missing.fs" --wrap true 2>&1)
check "sbatch --fanstore checks the dataset" \
  grep -q "fanstore: submit: dataset .* does not exist" <<<"$err"

echo "== dpkg -r, then dpkg -P"
check "dpkg -r removes the three" dpkg_locked -r "${PKGS[@]}"
# After dpkg -r only the conffile may remain (a package with maintainer scripts stays known
# to dpkg, as "rc", until it is purged).
for p in "${PKGS[@]}"; do
  s=$(pkg_state "$p")
  check "$p is removed (state ${s:-un})" test "${s:-un}" = rc -o "${s:-un}" = un
done
left=()
while read -r path; do
  [[ -f $path && $path != "$CONF" ]] && left+=("$path")
done < <(cat "$T"/fanstore*.list)
check "dpkg -r leaves no file but the conffile${left:+ (left: ${left[*]})}" test ${#left[@]} -eq 0
check "dpkg -r keeps the conffile $CONF" test -f "$CONF"
check "dpkg -P purges the three" purge_debs "${PKGS[@]}"
for p in "${PKGS[@]}"; do check "$p is unknown to dpkg after dpkg -P" pkg_unknown "$p"; done
mapfile -t left < <(pkg_leftovers "$T"/fanstore*.list)
check "nothing the packages installed is left${left:+ (left: ${left[*]})}" test ${#left[@]} -eq 0
INSTALLED_HERE=0
finish
