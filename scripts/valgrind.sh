#!/usr/bin/env bash
# Memory safety under valgrind's memcheck: the I/O-heavy conformance scenarios on the sync and
# worker methods (valgrind does not emulate io_uring; that method has the poisoned-buffer check,
# tests/poisoned_buffers.rs). Prints each scenario's error count and exits non-zero on any.
#
#   scripts/valgrind.sh            (needs valgrind: apt-get install -y valgrind)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind.sh: valgrind not found" >&2; exit 2; }
cargo test --release --test conformance --no-run 2>/dev/null
bin=$(ls -t target/release/deps/conformance-* | grep -v '\.d$' | head -1)
scenarios="lifecycle ops many_issuers read_stream buffer_pool cross_method_data drop_in_flight
  short_read torn_last_block errors fault_kinds batch_mode close_file issuer_exit ownership
  reclaim_in_batch released_handle staged_at_shutdown scan_ring page_verification
  checksum_accounting callbacks foreign_completion shutdown"
total=0
for s in $scenarios; do
  for m in sync worker; do
    out=$(valgrind --error-exitcode=0 "$bin" --test-threads=1 --exact "$s::$m" 2>&1)
    n=$(grep -o 'ERROR SUMMARY: [0-9]*' <<<"$out" | awk '{s += $3} END {print s + 0}')
    ok=$(grep -c '^test .* ok$' <<<"$out" || true)
    printf '%-22s %-7s tests ok: %s  memcheck errors: %s\n' "$s" "$m" "$ok" "$n"
    total=$((total + n))
  done
done
echo "valgrind memcheck: $total errors"
[[ $total -eq 0 ]]
