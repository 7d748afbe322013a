#!/usr/bin/env bash
# Readahead advice, two modes head to head: `dbaio bench --workload scan` in interleaved
# rounds (the order of the modes alternates each round), every run cold and inside a memory
# cgroup, then each mode's median and spread and the ratio of the medians. Run as root.
#
#   scripts/advice-pairs.sh [--rounds 6] [--method sync] [--clients 8] [--pattern seq]
#       [--modes "off throttled"] [--memory-limit 384M] [--dir /tmp/dbaio-bench-fs/scan]
#       [--size 4g] [--dbaio target/release/dbaio] [--out target/advice-pairs.jsonl]
#
# Why a memory cgroup: on a VM with free page reporting (virtio-balloon; see
# /sys/module/page_reporting) the guest hands pages that stay free for ~2 s back to the host,
# and the first write into such a page faults into the host. The scan drops every cache
# before it starts, so without a limit its page cache lands on handed-back pages in some runs
# and not in others, and the kernel's copy into them runs at a tenth of its speed: every mode
# turns bimodal. Inside a small cgroup the scan reclaims its own pages as it reads and reuses
# them at once, so none sits free long enough to be handed back; the device still serves
# every byte (the script prints what it read). `--memory-limit 0` runs without a cgroup.
set -euo pipefail
rounds=6 method=sync clients=8 pattern=seq modes="off throttled" limit=384M
dir=/tmp/dbaio-bench-fs/scan size=4g dbaio=target/release/dbaio out=target/advice-pairs.jsonl
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;; --method) method=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;; --pattern) pattern=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;; --memory-limit) limit=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;; --size) size=$2; shift 2 ;;
    --dbaio) dbaio=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "advice-pairs: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $dbaio ]] || { echo "advice-pairs: $dbaio not found (cargo build --release)" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "advice-pairs: run as root (drops caches, makes a cgroup)" >&2; exit 2; }
read -r -a mode_list <<< "$modes"

# The cgroup: v2 where the memory controller is on the unified hierarchy, else v1.
cg=
if [[ $limit != 0 ]]; then
  v2=$(findmnt -n -t cgroup2 -o TARGET | head -n 1 || true)
  if [[ -n $v2 ]] && grep -qw memory "$v2/cgroup.controllers" 2>/dev/null; then
    echo +memory > "$v2/cgroup.subtree_control" 2>/dev/null || true
    cg=$v2/dbaio-advice-pairs; mkdir -p "$cg"; echo "$limit" > "$cg/memory.max"
  elif [[ -d /sys/fs/cgroup/memory ]]; then
    cg=/sys/fs/cgroup/memory/dbaio-advice-pairs; mkdir -p "$cg"
    echo "$limit" > "$cg/memory.limit_in_bytes"
  else
    echo "advice-pairs: no memory cgroup controller here; use --memory-limit 0" >&2; exit 2
  fi
  echo "memory cgroup: $cg, limit $limit"
fi

# The scan's device, for the bytes it read (the directory made first: on a fresh file
# system the first run creates it, and findmnt finds no device for a path not there yet).
mkdir -p "$dir"
dev=$(findmnt -n -o SOURCE --target "$dir" 2>/dev/null || true)
stat_file=/sys/class/block/$(basename "${dev:-none}")/stat
reported=/sys/module/page_reporting/parameters/reported_kib
value() { [[ -r $1 ]] && awk -v f="$2" '{print $f}' "$1" || echo 0; }

: > "$out"
for ((r = 0; r < rounds; r++)); do
  for ((k = 0; k < ${#mode_list[@]}; k++)); do
    advice=${mode_list[$(((k + r) % ${#mode_list[@]}))]}
    rep0=$(value "$reported" 1) read0=$(value "$stat_file" 3)
    bash -c '[[ -z $1 ]] || echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$cg" \
      "$dbaio" bench --workload scan --dir "$dir" --size "$size" --io-method "$method" \
      --clients "$clients" --pattern "$pattern" --advice "$advice" \
      --effective-io-concurrency 256 --json 2>/dev/null >> "$out"
    rep1=$(value "$reported" 1) read1=$(value "$stat_file" 3)
    tail -n 1 "$out" | python3 -c 'import json,sys
j = json.load(sys.stdin)
print("round %s %-11s %.2f s  cold %s  device read %d MiB  handed to the host %d MiB"
      % (sys.argv[1], j["advice"], j["seconds"], j["cold"] and j["dropped_all_caches"],
         int(sys.argv[2]) // 2048, int(sys.argv[3]) // 1024))' \
      "$r" $((read1 - read0)) $((rep1 - rep0))
  done
done
python3 - "$out" "${mode_list[@]}" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
modes = sys.argv[2:]
secs = {m: [r["seconds"] for r in runs if r["advice"] == m] for m in modes}
med = {m: statistics.median(s) for m, s in secs.items()}
for m in modes:
    print(f"{m:<11} median {med[m]:.2f} s, spread {min(secs[m]):.2f}-{max(secs[m]):.2f} s "
          f"({len(secs[m])} runs)")
base = modes[0]
for m in modes[1:]:
    print(f"{m} against {base}: {med[base] / med[m]:.2f}x (median {base} s / median {m} s)")
PY
