#!/usr/bin/env bash
# The `fanstore` command line against real trees: round trips, exit codes, --help, and every
# kind of damaged dataset. Usage: cli_test.sh BUILD_DIR
# shellcheck source=../lib.sh
source "$(dirname "$0")/../lib.sh"
F="$1/bin/fanstore"
T=$(mktmp)
trap 'rm -rf "$T"' EXIT
cd "$T" || exit 1

echo "== round trip"
make_tree src 5
mkfifo src/a/fifo
ln -s /etc/passwd src/a/escape
ln src/a/b/numbers.txt src/a/numbers-again.txt  # a hard link
# ref: the tree as a dataset can hold it (no FIFO, no escaping link), mtimes kept.
cp -a src ref && rm ref/a/fifo ref/a/escape && touch -r src/a ref/a
out=$("$F" pack src ds.fs --shard-size 100K 2>err.txt); rc=$?
check "pack succeeds" test $rc -eq 0
check "pack warns about the FIFO" grep -q "FIFO.*fifo" err.txt
check "pack warns about the escaping symlink" grep -q "escape.*outside" err.txt
check "pack prints a summary" grep -q "packed .* files" <<<"$out"
check "no temporary directory is left" bash -c '! ls -d ds.fs.tmp-* 2>/dev/null'
check "info prints counts" bash -c "'$F' info ds.fs | grep -q 'files: *3[0-9]'"
check "info --json is valid JSON" bash -c "'$F' info ds.fs --json | /usr/bin/python3 -m json.tool >/dev/null"
check "verify succeeds" "$F" verify ds.fs -q
check "ls lists the non-ASCII file" bash -c "'$F' ls ds.fs | grep -q 'données/élève/naïve.txt'"
check "ls of a directory lists its children" bash -c "'$F' ls ds.fs a/b/c | grep -qx random.bin"
check "ls -l shows the symlink target" bash -c "'$F' ls -l ds.fs dirlink | grep -q -- '-> a/b'"
check "cat gives identical bytes" cmp <("$F" cat ds.fs a/b/numbers.txt) src/a/b/numbers.txt
check "cat of the large file" cmp <("$F" cat ds.fs big.bin) src/big.bin
"$F" extract ds.fs restored -q
check "extract: diff -r matches" diff -r --no-dereference ref restored
manifest() { (cd "$1" && find . -printf '%p %y %m %s %T@ %l\n' | sort); }
check "extract: modes, sizes, mtimes and link targets match" diff <(manifest ref) <(manifest restored)
hashes() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
check "extract: content hash of every file matches" diff <(hashes ref) <(hashes restored)
expect_fail "extract into a non-empty directory" 2 "not empty" "$F" extract ds.fs restored
check "extract: a hard link comes back as another name of the same file" \
  test "$(stat -c '%i %h' restored/a/b/numbers.txt)" = "$(stat -c '%i %h' restored/a/numbers-again.txt)" -a \
  "$(stat -c %h restored/a/numbers-again.txt)" = 2
check "info: the dataset is version 3" bash -c "'$F' info ds.fs --json | grep -q '\"version\": 3'"

echo "== a dataset of more shards than the usual soft limit of open files"
mkdir many && for i in $(seq 1100); do : >"many/f$i"; done
"$F" pack -q --shard-files 1 many many.fs
if (($(ulimit -Hn) >= 4096)); then
  # shellcheck disable=SC2016  # expanded by the inner shell
  check "verify, ls and extract of 1,100 shards under a soft limit of 1,024" bash -c \
    'ulimit -Sn 1024 && "$0" verify -q many.fs && [[ $("$0" ls many.fs | wc -l) == 1100 ]] &&
     "$0" extract many.fs many.out >/dev/null && [[ $(ls many.out | wc -l) == 1100 ]]' "$F"
else
  echo "skip: the hard limit of open files is $(ulimit -Hn)"
fi

echo "== pack from archives"
# The same tree through tar(1) (pax keeps nanosecond mtimes), from a file and, compressed, from
# a pipe: extracting the dataset gives the tree back.
tar -C ref --format=pax -cf ref.tar .
out=$("$F" pack ref.tar tar.fs --shard-size 100K 2>err.txt); rc=$?
check "pack of a tar archive succeeds, without warnings" test $rc -eq 0 -a ! -s err.txt
check "pack of a tar archive prints a summary" grep -q "packed .* files" <<<"$out"
"$F" extract -q tar.fs tar-out
check "archive: modes, sizes, mtimes and link targets match" diff <(manifest ref) <(manifest tar-out)
check "archive: content hash of every file matches" diff <(hashes ref) <(hashes tar-out)
tar -C ref --format=pax -c . | zstd -q | "$F" pack -q - pipe.fs
"$F" extract -q pipe.fs pipe-out
check "archive from a zstd pipe: the same tree" diff <(manifest ref) <(manifest pipe-out)
# ImageNet's shape: a tar of one tar per class.
mkdir classes
for c in n01 n02; do
  cp -a ref/a "classes/$c" && tar -C "classes/$c" -cf "classes/$c.tar" .
done
tar -C classes -cf train.tar n01.tar n02.tar
"$F" pack -q train.tar train.fs
"$F" extract -q train.fs train-out
check "archives inside an archive become directories" diff -r --no-dereference classes/n01 train-out/n01
check "every class is there" diff <(hashes classes/n02) <(hashes train-out/n02)
expect_fail "pack of a file that is no archive" 2 "ref.tar.gz is not a tar archive" \
  bash -c "head -c 3000 /dev/urandom > ref.tar.gz && '$F' pack ref.tar.gz bad.fs"
expect_fail "pack of a truncated archive names the member" 1 "cut.tar: ./a/b/.*: Truncated tar archive" \
  bash -c "head -c 20000 ref.tar > cut.tar && '$F' pack cut.tar bad.fs"
check "failed archive packs leave nothing" bash -c '! ls -d bad.fs bad.fs.tmp-* 2>/dev/null'

echo "== progress"
# stderr is a file here: no progress line unless --progress forces it, and never with -q.
check "pack prints no progress when stderr is not a terminal" bash -c '! grep -q "%" err.txt'
"$F" pack src prog.fs --shard-size 100K --progress >/dev/null 2>prog.txt
last=$(tail -n 1 prog.txt | tr '\r' '\n' | tail -n 1)
check "pack --progress redraws one line with \\r" grep -q $'^\rpack \\[' prog.txt
check "pack --progress ends at 100% with files, rate and ETA" grep -qE \
  '^pack \[=+\] 100%  [0-9.]+ [KMG]?i?B / [0-9.]+ [KMG]?i?B  [0-9]+/[0-9]+ files  [0-9.]+ [KMG]?i?B/s  ETA 0:00 *$' <<<"$last"
check "pack --progress ends with a newline" test "$(tail -c 1 prog.txt | od -An -c | tr -d ' ')" = '\n'
for sub in verify extract; do
  args=(ds.fs); [[ $sub == extract ]] && args+=(prog-out)
  "$F" "$sub" "${args[@]}" --progress >/dev/null 2>prog.txt
  check "$sub --progress ends at 100% and a newline" bash -c \
    "tail -n 1 prog.txt | tr '\r' '\n' | tail -n 1 | grep -qE '^$sub (\[=+\] )?100% .* ([0-9]+)/\\2 files .* ETA 0:00 *\$' && test \"\$(tail -c 1 prog.txt | od -An -c | tr -d ' ')\" = '\\n'"
done
"$F" verify ds.fs -q --progress 2>prog.txt
check "-q silences --progress" test ! -s prog.txt
"$F" verify ds.fs 2>prog.txt >/dev/null
check "verify prints no progress when stderr is not a terminal" test ! -s prog.txt

echo "== stats --prometheus"
cat > job.stats <<'EOF2'
{"node":"c1","rank":0,"bytes_staged":2048,"stage_in_seconds":0.5,"opens":{"local":3,"remote":1,"cached":0,"fallback":0,"errors":0},"bytes":{"local":300,"remote":100,"cached":0,"fallback":0},"cache":{"used":10,"capacity":1000},"peers":{"fetch_errors":0},"unpack":{"done":true}}
{"node":"c2","rank":1,"bytes_staged":1024,"stage_in_seconds":0.75,"opens":{"local":5,"remote":0,"cached":2,"fallback":1,"errors":1},"bytes":{"local":500,"remote":0,"cached":20,"fallback":7},"cache":{"used":0,"capacity":1000},"peers":{"fetch_errors":2},"unpack":{"done":false}}
EOF2
prom=$("$F" stats job.stats --prometheus)
check "stats --prometheus: HELP and TYPE per family" test "$(grep -c '^# TYPE fanstore_[a-z_]* \(counter\|gauge\)$' <<<"$prom")" -eq 11
check "stats --prometheus: a sample per node and kind" grep -qx 'fanstore_bytes_total{node="c2",rank="1",kind="fallback"} 7' <<<"$prom"
check "stats --prometheus: gauges" grep -qx 'fanstore_stage_in_seconds{node="c1",rank="0"} 0.5' <<<"$prom"
"$F" stats job.stats --prometheus >prom.txt
check "stats --prometheus: every line is a comment or a sample" bash -c \
  "! grep -vE '^(# (HELP|TYPE) fanstore_[a-z_]+ .+|fanstore_[a-z_]+\\{node=\"[^\"]*\",rank=\"[0-9]+\"(,kind=\"[a-z]+\")?\\} [0-9.]+)\$' prom.txt"
"$F" stats job.stats --prometheus --output metrics.prom
check "stats --output writes the same text" diff metrics.prom prom.txt
check "stats --output leaves no temporary" test ! -e metrics.prom.tmp
expect_fail "stats --output needs --prometheus" 2 "^fanstore stats: --output needs --prometheus" "$F" stats job.stats --output x.prom
expect_fail "stats --json excludes --prometheus" 2 "exclude each other" "$F" stats job.stats --json --prometheus
expect_fail "stats --plot needs the agent" 2 "--plot needs the agent" "$F" stats job.stats --plot x.png

echo "== --help and usage"
# Every option of every subcommand, as --help must list it.
declare -A OPTIONS=(
  [pack]="--shard-size --level --threads --dict --no-sync --quiet --progress --help"
  [verify]="--threads --quiet --progress --help"
  [ls]="--long --where --help"
  [cat]="--help"
  [extract]="--threads --quiet --progress --help"
  [info]="--json --help"
  [run]="--mount --local-dir --timeout --unpack --verbose --help"
  [stats]="--json --prometheus --output --plot --help"
)
for sub in pack verify ls cat extract info run stats; do
  check "$sub --help exits 0 with usage" bash -c "'$F' $sub --help | grep -q '^Usage: fanstore $sub'"
  help=$("$F" "$sub" --help)
  for opt in ${OPTIONS[$sub]}; do
    check "$sub --help lists $opt" grep -qE -- "(^|[ ,])$opt( |$)" <<<"$help"
  done
  expect_fail "$sub rejects an unknown option" 2 "not expected:.*--frobnicate" "$F" "$sub" ds.fs x --frobnicate
done
check "fanstore --help" bash -c "'$F' --help | grep -q Commands"
check "fanstore --help lists every command" bash -c \
  "for c in pack verify ls cat extract info run stats version; do '$F' --help | grep -q \"^  \$c\" || exit 1; done"
expect_fail "no command" 2 "no command" "$F"
expect_fail "unknown command" 2 "unknown command" "$F" frobnicate
expect_fail "pack without arguments" 2 "SRC is required" "$F" pack
expect_fail "pack with one argument" 2 "DST.fs is required" "$F" pack src
expect_fail "pack of a tree and another source" 2 "src is a directory: pack one directory" "$F" pack src x.fs extra
expect_fail "bad --level" 2 "^fanstore pack: --level: '99' is not a whole number from 0 to 19" "$F" pack src x.fs --level 99
expect_fail "bad --level (not a number)" 2 "--level: 'high' is not a whole number" "$F" pack src x.fs --level high
expect_fail "bad --shard-size" 2 "--shard-size: '12Q' is not a size" "$F" pack src x.fs --shard-size 12Q
expect_fail "zero --shard-size" 2 "--shard-size: '0' is not a size" "$F" pack src x.fs --shard-size 0
expect_fail "out-of-range --shard-size" 2 "--shard-size: '99999999999T' is not a size" "$F" pack src x.fs --shard-size 99999999999T
expect_fail "--level without a value" 2 "--level" "$F" pack src x.fs --level
for sub in pack extract; do
  for bad in abc 0 -3 1025 1.5; do
    expect_fail "$sub --threads $bad" 2 "^fanstore $sub: --threads: '$bad' is not a whole number from 1 to 1024" \
      "$F" "$sub" ds.fs x.fs --threads "$bad"
  done
done
expect_fail "verify --threads abc" 2 "--threads: 'abc' is not a whole number" "$F" verify ds.fs --threads abc
expect_fail "run --timeout 0" 2 "--timeout: '0' is not a number of seconds above 0" "$F" run ds.fs --timeout 0 -- true
expect_fail "run --timeout abc" 2 "--timeout: 'abc' is not a number of seconds" "$F" run ds.fs --timeout abc -- true
expect_fail "run --unpack bogus" 2 "--unpack: 'bogus' is not one of auto, eager or lazy" "$F" run ds.fs --unpack bogus -- true
expect_fail "run --mount relative" 2 "--mount: must be a clean absolute path" "$F" run ds.fs --mount rel -- true
expect_fail "run without -- COMMAND" 2 "-- COMMAND is missing" "$F" run ds.fs
expect_fail "run without DS.fs or --output" 2 "give DS.fs, --output DIR, or both" "$F" run -- true
expect_fail "run with two datasets" 2 "not expected: ds2.fs" "$F" run ds.fs ds2.fs -- true
expect_fail "run with a dataset that names no mount" 2 "cannot derive a mount name from .*; use --mount" "$F" run .fs -- true
check "run: options after -- belong to COMMAND" bash -c "'$F' run ds.fs --timeout x -- --help 2>&1 | grep -q -- '--timeout'"
expect_fail "stats with two files" 2 "not expected: b" "$F" stats a b
expect_fail "pack onto an existing destination" 2 "already exists" "$F" pack src ds.fs
expect_fail "pack of a missing source" 1 "src-missing.*No such file" "$F" pack src-missing y.fs
check "failed packs leave nothing" bash -c '! ls -d x.fs y.fs y.fs.tmp-* x.fs.tmp-* 2>/dev/null'
expect_fail "missing dataset" 1 "nope.fs does not exist" "$F" verify nope.fs
expect_fail "not a dataset" 1 "not a FanStore dataset" "$F" verify src
expect_fail "stats outside a job" 1 "FANSTORE_SOCKET is not set" env -u FANSTORE_SOCKET "$F" stats
expect_fail "cat of a missing path" 1 "no/such: no such file" "$F" cat ds.fs no/such

echo "== damaged datasets"
fresh() { rm -rf bad.fs; cp -a ds.fs bad.fs; }
fresh
# The biggest shard holds big.bin (5 MiB > shard size): flip a byte in its middle.
# shellcheck disable=SC2012  # ls -S: the largest shard; shard names are plain (shard-NNNNN.fsd).
big=$(ls -S bad.fs/shard-*.fsd | head -1)
flip_byte "$big" 1048576
expect_fail "flipped byte: names shard, file and offset" 1 "$(basename "$big").*file 'big.bin' \(frame at offset [0-9]+\)" "$F" verify bad.fs
expect_fail "flipped byte: cat refuses bad bytes" 1 "checksum mismatch" "$F" cat bad.fs big.bin
fresh; truncate -s 1000 bad.fs/shard-00003.fsd
expect_fail "truncated shard" 1 "shard-00003.fsd.*(truncated|differs)" "$F" verify bad.fs
fresh; rm bad.fs/shard-00002.fsd
expect_fail "missing shard" 1 "missing shard .*shard-00002.fsd" "$F" verify bad.fs
fresh; printf 'XXXXXXXX' | dd of=bad.fs/shard-00001.fsd bs=1 conv=notrunc status=none
expect_fail "wrong magic" 1 "shard-00001.fsd: bad magic" "$F" verify bad.fs
fresh; printf '\x07' | dd of=bad.fs/shard-00001.fsd bs=1 seek=8 conv=notrunc status=none
expect_fail "wrong version" 1 "shard-00001.fsd: unsupported shard version 7" "$F" verify bad.fs
fresh; sz=$(stat -c %s bad.fs/shard-00000.fsd); printf '\xff' | dd of=bad.fs/shard-00000.fsd bs=1 seek=$((sz - 70)) conv=notrunc status=none
expect_fail "corrupt index" 1 "shard-00000.fsd: index (checksum|at offset)" "$F" verify bad.fs
fresh; echo '{"format": "fanstore", "version": 1' > bad.fs/manifest.json
expect_fail "corrupt manifest" 1 "manifest.json: not valid JSON" "$F" verify bad.fs
fresh; sed -i 's/"version": 3/"version": 4/' bad.fs/manifest.json
expect_fail "manifest of a newer version" 1 "unsupported dataset version 4 \(this tool reads versions 1 to 3\)" "$F" info bad.fs

echo "== unreadable source (as an unprivileged user)"
if id nobody >/dev/null 2>&1 && [[ $(id -u) -eq 0 ]]; then
  mkdir -p "$T/u" && cp -a ref "$T/u/src" && chmod -R a+rX "$T/u/src" && chmod 0000 "$T/u/src/a/b/numbers.txt" && chmod 0777 "$T/u"
  chmod 0711 "$T"
  expect_fail "permission denied names the file" 1 "cannot read .*numbers.txt: Permission denied" runuser -u nobody -- "$F" pack "$T/u/src" "$T/u/out.fs"
  check "nothing left behind" bash -c "! ls -d '$T'/u/out.fs* 2>/dev/null"
  chmod 0644 "$T/u/src/a/b/numbers.txt"; chmod 0000 "$T/u/src/a/b/c"
  expect_fail "unreadable directory names the directory" 1 "cannot read directory .*a/b/c" runuser -u nobody -- "$F" pack "$T/u/src" "$T/u/out.fs"
  chmod 0755 "$T/u/src/a/b/c"
else
  echo "  (skipped: needs root and the user nobody)"
fi

echo "== interrupted pack"
mkdir big; for i in $(seq 1 40); do seq $((i * 100000)) > "big/t$i.txt"; done
"$F" pack big int.fs --level 19 --threads 1 -q & pid=$!
sleep 0.5; kill -INT $pid; wait $pid; rc=$?
check "SIGINT stops the pack with an error" test $rc -ne 0
check "SIGINT leaves no dataset and no temporary" bash -c '! ls -d int.fs int.fs.tmp-* 2>/dev/null'
"$F" pack big kill.fs --level 19 --threads 1 -q & pid=$!
sleep 0.5; kill -KILL $pid; wait $pid 2>/dev/null
check "SIGKILL leaves no valid-looking dataset" bash -c '! test -e kill.fs'
for t in kill.fs.tmp-*; do expect_fail "the leftover temporary is not a dataset" 1 "not a FanStore dataset" "$F" verify "$t"; done

echo "== the agent's options are checked"
A="$(dirname "$F")/fanstore-agent"
for bad in "--threads 0" "--threads x" "--threads 99999999999999999999" "--replicas 0" "--replicas 2x" \
  "--replicas 100001" "--cache-size 0" "--cache-size 4Q" "--job-id x" "--job-id 0" "--job-id 4294967296" \
  "--bootstrap mpi" "--unpack sometimes"; do
  # shellcheck disable=SC2086
  expect_fail "fanstore-agent $bad" 2 "^fanstore-agent: ${bad%% *}: '${bad#* }' is not" \
    "$A" --dataset ds.fs --local-dir l --run-dir r --mount /m $bad
done
expect_fail "fanstore-agent with an unknown option" 2 "not expected: --frobnicate" \
  "$A" --dataset ds.fs --local-dir l --run-dir r --mount /m --frobnicate
expect_fail "fanstore-agent without --run-dir" 2 "--run-dir is required" "$A" --dataset ds.fs --local-dir l --mount /m
agent_help=$("$A" --help)
for opt in --dataset --local-dir --run-dir --mount --bootstrap --replicas --threads --cache-size --no-peers \
  --no-prefetch --prefetch-streams --unpack --node-name --job-id --peer-addr --stats-out --verbose --quiet --help; do
  check "fanstore-agent --help lists $opt" grep -qE -- "(^|[ ,])$opt( |$)" <<<"$agent_help"
done
expect_fail "fanstore-agent --read-entry with a bad index" 2 "INDEX: 'x' is not a whole number" "$A" --read-entry ds.fs 0 x
expect_fail "fanstore-agent --read-entry with a missing index" 2 "INDEX is required" "$A" --read-entry ds.fs 0
expect_fail "fanstore-agent --read-entry of a missing shard" 3 "no shard 999" "$A" --read-entry ds.fs 999 0
mkdir -m 0700 rd && echo '{"error":"","pid":1,"state":"ready","unpacked":true}' > rd/status.json
check "fanstore-agent --read-state prints the state" test "$("$A" --read-state rd)" = ready
echo '{"state":"rea' > rd/status.json
expect_fail "fanstore-agent --read-state of a torn file" 1 "not a JSON object" "$A" --read-state rd

finish
