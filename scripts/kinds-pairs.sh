#!/usr/bin/env bash
# Worker processes against worker threads, in enough pairs to tell a few percent apart:
# `dbaio bench` with `io_worker_kind = thread` then `process` (the order alternates each
# round), each run on fresh random offsets; then each kind's median IOPS, the median of the
# per-round ratios (processes / threads) and a bootstrap 95% interval for it, and, per run,
# on which CPU each worker last ran.
#
#   scripts/kinds-pairs.sh [--rounds 60] [--runtime 2] [--workers 8] [--iodepth 32]
#       [--file /dev/loop0] [--size 2g] [--dbaio target/release/dbaio]
#       [--out target/kinds-pairs.jsonl] [--bench-opt=--complete-min=1]...
#
# Why so many rounds: on a small VM whose scheduler does not move a running task between
# CPUs (count them: `perf stat -a -e cpu-migrations`), where each worker and the issuer
# happen to start decides a whole run, and one pair's ratio lands anywhere in 0.7–1.3. The
# median of 10 pairs then moves by ±4%; 60 pairs give an interval about as wide as the
# difference issue 35 asks about (docs/benchmarks.md, "Worker processes in 60 pairs").
set -euo pipefail
rounds=60 runtime=2 workers=8 depth=32 file=/dev/loop0 size=2g
dbaio=target/release/dbaio out=target/kinds-pairs.jsonl bench_opts=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;; --runtime) runtime=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;; --iodepth) depth=$2; shift 2 ;;
    --file) file=$2; shift 2 ;; --size) size=$2; shift 2 ;;
    --dbaio) dbaio=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    --bench-opt=*) bench_opts+=("${1#--bench-opt=}"); shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "kinds-pairs: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $dbaio ]] || { echo "kinds-pairs: $dbaio not found (cargo build --release)" >&2; exit 2; }
[[ -e $file ]] || { echo "kinds-pairs: $file not found (scripts/loop-device.sh setup)" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "kinds-pairs: --rounds wants a positive count" >&2; exit 2; }
mkdir -p "$(dirname "$out")"
: > "$out"

# Where the workers of bench $1 last ran, as "cpuN:count ..." (worker threads are named
# dbaio-io-worker, worker processes dbaio-io-w<N>; both are looked for in the bench and its
# children).
placement() {
  local pids
  pids=$(pgrep -d, -P "$1" || true)
  ps -L -o comm=,psr= -p "$1${pids:+,$pids}" 2>/dev/null \
    | awk '$1 ~ /^dbaio-io-w/ { n[$2]++ } END { for (c in n) printf "cpu%s:%d ", c, n[c] }'
}

run() {
  local kind=$1 json where
  "$dbaio" bench --filename "$file" --size "$size" --direct --io-method worker \
    --io-workers "$workers" --iodepth "$depth" -c "io_worker_kind=$kind" \
    --runtime "$runtime" --seed $((RANDOM * 32768 + RANDOM)) "${bench_opts[@]}" --json \
    > "$out.run" 2>&1 &
  local bench=$!
  sleep "$(awk -v r="$runtime" 'BEGIN { print r / 2 }')"
  where=$(placement "$bench")
  wait "$bench" || { echo "kinds-pairs: the $kind run failed:" >&2; cat "$out.run" >&2; exit 1; }
  json=$(grep '^{' "$out.run" | tail -n 1)
  printf '{"round":%d,"kind":"%s","placement":"%s","run":%s}\n' "$r" "$kind" "${where% }" "$json" >> "$out"
  echo "$json" | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["iops"]))'
}

for r in $(seq "$rounds"); do
  if (( r % 2 )); then t=$(run thread); p=$(run process); else p=$(run process); t=$(run thread); fi
  printf 'round %d: threads %d, processes %d (%.3f)\n' "$r" "$t" "$p" "$(awk -v p="$p" -v t="$t" 'BEGIN { print p / t }')"
done
rm -f "$out.run"

python3 - "$out" <<'PY'
import json, random, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
by = {}
for x in runs:
    by.setdefault(x["round"], {})[x["kind"]] = x["run"]["iops"]
pairs = [v["process"] / v["thread"] for v in by.values() if len(v) == 2]
t = statistics.median(v["thread"] for v in by.values())
p = statistics.median(v["process"] for v in by.values())
random.seed(1)
boot = sorted(statistics.median(random.choices(pairs, k=len(pairs))) for _ in range(4000))
lo, hi = boot[len(boot) // 40], boot[len(boot) - 1 - len(boot) // 40]
print(f"{len(pairs)} pairs: threads {t:.0f} IOPS, processes {p:.0f} (medians; {p / t:.3f})")
print(f"processes/threads per pair: median {statistics.median(pairs):.3f}, "
      f"95% interval {lo:.3f}..{hi:.3f}, range {min(pairs):.3f}..{max(pairs):.3f}")
PY
echo "runs: $out"
