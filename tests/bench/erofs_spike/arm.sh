#!/bin/bash
# shellcheck disable=SC2086,SC2046  # $N and the lists are meant to split: a spike, not the suite
# arm.sh LABEL IMAGE LIST_RAND LIST_TREE MODE PREWALK
#  MODE: file (file-backed mount(2)), loop (losetup + mount)
#  PREWALK: none | walk | walkstat | walkstat2 | openTree | readTree | statTree | catimg | fadvimg | dropimg
# Fresh mount, optional pre-walk (timed), first pass (random), second pass, umount (timed).
S=$(cd "$(dirname "$0")" && pwd); N="nice -n 19 ionice -c3"; MNT=/var/tmp/spike/mnt
label=$1 img=$2 lr=$3 lt=$4 mode=$5 pw=$6
slab(){ awk '$1 ~ /^(erofs_inode|dentry|ext4_inode_cache|inode_cache|shmem_inode_cache)$/ {printf "%s=%dMB ", $1, $3*$4/1048576}' /proc/slabinfo; }
case $pw in dropimg) $N dd if=$img iflag=nocache count=0 status=none; ;; catimg) $N cat $img > /dev/null;; esac
t0=$(date +%s.%N)
if [ $mode = loop ]; then dev=$(losetup -f --show -r $img); mount -t erofs -o ro $dev $MNT; else $S/fsmount $img $MNT ${OPTS:+"$OPTS"}; fi || exit 1
t1=$(date +%s.%N); pwt=0
case $pw in
  walk) pwt=$( { /usr/bin/time -f %e/%U/%S $N $S/walk $MNT >/dev/null; } 2>&1 );;
  walkstat) pwt=$( { /usr/bin/time -f %e/%U/%S $N $S/walk $MNT stat >/dev/null; } 2>&1 );;
  walkstat2) pwt=$( { /usr/bin/time -f %e/%U/%S $N $S/walk $MNT stat 2 >/dev/null; } 2>&1 );;
  openTree) pwt=$( { /usr/bin/time -f %e/%U/%S $N $S/reader open $MNT $lt >/dev/null; } 2>&1 );;
  openTree2) pwt=$( { /usr/bin/time -f %e/%U/%S $N $S/reader open $MNT $lt 2 >/dev/null; } 2>&1 );;
  readTree) pwt=$( { /usr/bin/time -f %e/%U/%S $N $S/reader read $MNT $lt >/dev/null; } 2>&1 );;
  readTree2) pwt=$( { /usr/bin/time -f %e/%U/%S $N $S/reader read $MNT $lt 2 >/dev/null; } 2>&1 );;
  statTree) pwt=$( { /usr/bin/time -f %e/%U/%S $N $S/reader stat $MNT $lt >/dev/null; } 2>&1 );;
  find) pwt=$( { /usr/bin/time -f %e/%U/%S $N find $MNT -type f >/dev/null; } 2>&1 );;
esac
p1=$($N $S/reader read $MNT $lr | sed "s/.*s=\([0-9.]*\) us\/file=\([0-9.]*\).*cpu_us\/file=\([0-9.]*\)/\1s \2us cpu\3us/")
sl=$(slab)
p2=$($N $S/reader read $MNT $lr | sed "s/.*s=\([0-9.]*\) us\/file=\([0-9.]*\).*cpu_us\/file=\([0-9.]*\)/\1s \2us cpu\3us/")
t2=$(date +%s.%N); umount $MNT; [ $mode = loop ] && losetup -d $dev; t3=$(date +%s.%N)
printf "%-28s %-5s prewalk=%-9s %ss | pass1 %-16s | pass2 %-16s | mount %.2fs umount %.2fs | load %s | %s\n" "$label" $mode $pw $pwt "$p1" "$p2" $(echo "$t1-$t0" | bc) $(echo "$t3-$t2" | bc) "$(cut -d' ' -f1 /proc/loadavg)" "$sl"
