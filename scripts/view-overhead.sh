#!/usr/bin/env bash
# The cost of watching: `dbaio bench` 4k randread QD32 (O_DIRECT) with its aios view polled
# 100 times a second over the introspection socket (every poll asks for "all": rows, waits and
# stats), against the same run unpolled, alternating, ROUNDS times. Prints each round and the
# median ratio polled/unpolled.
#
#   scripts/view-overhead.sh [--method io_uring] [--rounds 3] [--runtime 5] [--file PATH]
set -euo pipefail
method=io_uring rounds=3 runtime=5 file=${TMPDIR:-/tmp}/dbaio-vs-fio.dat dbaio=target/release/dbaio
while [[ $# -gt 0 ]]; do
  case $1 in
    --method) method=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;;
    --runtime) runtime=$2; shift 2 ;; --file) file=$2; shift 2 ;;
    *) echo "view-overhead: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $dbaio ]] || { echo "view-overhead: build first (cargo build --release)" >&2; exit 2; }
sock=$(mktemp -u /tmp/dbaio-view-XXXXXX.sock)
run() {
  "$dbaio" bench --filename "$file" --size 4G --rw randread --bs 4k --iodepth 32 --runtime "$runtime" \
    --direct --io-method "$method" --json "$@" | python3 -c 'import json,sys; print(json.load(sys.stdin)["iops"])'
}
poll() {  # 100 polls a second until the socket goes away; prints how many succeeded
  python3 - "$sock" <<'PY'
import socket, sys, time, json
path, n, t0 = sys.argv[1], 0, time.time()
while time.time() - t0 < 2 and not n:
    try:
        socket.socket(socket.AF_UNIX).connect(path); n = -1
    except OSError:
        time.sleep(0.005)
n, nxt = 0, time.time()
while True:
    try:
        s = socket.socket(socket.AF_UNIX); s.connect(path); s.sendall(b"all\n")
        data = b"".join(iter(lambda: s.recv(65536), b"")); json.loads(data); n += 1
    except OSError:
        break
    nxt += 0.01
    time.sleep(max(0, nxt - time.time()))
print(n)
PY
}
ratios=()
for ((r = 1; r <= rounds; r++)); do
  base=$(run)
  poll > /tmp/dbaio-polls.$$ &
  watched=$(run --socket "$sock")
  wait
  polls=$(cat /tmp/dbaio-polls.$$)
  ratio=$(python3 -c "print(f'{$watched/$base:.3f}')")
  ratios+=("$ratio")
  printf 'round %d: unpolled %.0f IOPS, polled %.0f IOPS (%s polls), ratio %s\n' "$r" "$base" "$watched" "$polls" "$ratio"
done
rm -f /tmp/dbaio-polls.$$
python3 -c "import statistics,sys; print('median ratio polled/unpolled:', statistics.median(map(float, sys.argv[1:])))" "${ratios[@]}"
