#!/bin/bash
# shellcheck disable=SC2086,SC2046  # $N and the lists are meant to split: a spike, not the suite
# native.sh TREE LIST_RAND : warm passes and a cold-dentry pass (echo 2 > drop_caches) of the native tree.
S=$(cd "$(dirname "$0")" && pwd); N="nice -n 19 ionice -c3"; f(){ sed "s/.*s=\([0-9.]*\) us\/file=\([0-9.]*\).*cpu_us\/file=\([0-9.]*\)/\1s \2us cpu\3us/"; }
$N $S/reader read $1 $2 >/dev/null
w=$($N $S/reader read $1 $2 | f)
echo 2 > /proc/sys/vm/drop_caches
c=$($N $S/reader read $1 $2 | f)
echo 2 > /proc/sys/vm/drop_caches
so=$($N $S/reader stat $1 $2 | f)
printf "%-28s warm %-26s | cold-dentry %-26s | stat-only after drop2 %s | load %s\n" "native $1" "$w" "$c" "$so" "$(cut -d' ' -f1 /proc/loadavg)"
