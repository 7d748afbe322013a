#!/usr/bin/env bash
# Readahead advice, measured: `dbaio bench --workload scan` for both patterns x 1, 4, 16 clients
# x advice off / unthrottled / throttled x io_method sync and worker, cold (run as root so that
# every run drops all caches), effective_io_concurrency 256; medians of --rounds (default 3),
# the three advice modes alternating in a rotating order, each run after the same discarded
# run (see below). Prints the table of
# docs/benchmarks.md ("Readahead advice") and keeps every run's JSON in --out.
#
#   scripts/advice-matrix.sh [--rounds 3] [--out target/advice-matrix.jsonl] [--dbaio PATH]
set -euo pipefail
rounds=3 out=target/advice-matrix.jsonl dbaio=target/release/dbaio
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;; --out) out=$2; shift 2 ;; --dbaio) dbaio=$2; shift 2 ;;
    *) echo "advice-matrix: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -x $dbaio ]] || { echo "advice-matrix: $dbaio not found (cargo build --release)" >&2; exit 2; }
: > "$out"
modes=(off unthrottled throttled)
for ((r = 0; r < rounds; r++)); do
  for pattern in seq sorted-random; do
    for clients in 1 4 16; do
      for method in sync worker; do
        for ((k = 0; k < 3; k++)); do
          advice=${modes[$(((k + r) % 3))]}
          # Every measured run follows the same discarded run (a 16-client sequential scan
          # without advice): on this VM a run is slowed by what ran before it (after an
          # unthrottled scan, an `off` scan measured 6.2 s against 2.7 s after another `off`
          # scan; waiting 10 s did not help, one run did), so each mode gets the same start.
          "$dbaio" bench --workload scan --io-method sync --clients 16 --pattern seq \
            --advice off --json >/dev/null 2>&1
          "$dbaio" bench --workload scan --io-method "$method" --clients "$clients" \
            --pattern "$pattern" --advice "$advice" --effective-io-concurrency 256 --json \
            2>/dev/null >> "$out"
          tail -n 1 "$out" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("round", sys.argv[1], j["io_method"], j["pattern"], j["clients"], "clients", j["advice"], "%.2f s" % j["seconds"], file=sys.stderr)' "$r"
        done
      done
    done
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
cold = all(r["cold"] and r["dropped_all_caches"] for r in runs)
med = {}
for r in runs:
    med.setdefault((r["io_method"], r["pattern"], r["clients"], r["advice"]), []).append(r["seconds"])
print(f"{len(runs)} runs, every one cold with all caches dropped: {cold}")
print("| method | pattern | clients | off s | unthrottled s | throttled s | throttled / best | throttled vs off |")
print("|---|---|---|---|---|---|---|---|")
for m in ("sync", "worker"):
    for p in ("seq", "sorted-random"):
        for c in (1, 4, 16):
            s = {a: statistics.median(med[(m, p, c, a)]) for a in ("off", "unthrottled", "throttled")}
            best = min(s["off"], s["unthrottled"])
            print(f"| {m} | {p} | {c} | {s['off']:.2f} | {s['unthrottled']:.2f} | {s['throttled']:.2f} "
                  f"| {best / s['throttled']:.2f} | {s['off'] / s['throttled']:.2f}x |")
PY
