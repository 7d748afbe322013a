#!/usr/bin/env bash
# A block device whose reads cost nothing but the reader's own CPU: zram (compressed RAM),
# filled with random bytes so that nothing compresses. A 4 KiB O_DIRECT read is a copy in the
# reading thread, ~1.5 µs, with no kernel thread, no interrupt and no softirq on the way; so
# the software around each read — a worker method's hand-off, its wakes, its sleeps — is
# almost all there is to measure (docs/benchmarks.md, "One wake per submission"). Where the
# loop device of scripts/loop-device.sh stands for an NVMe drive whose completions cost
# CPU, this stands for one whose completions cost none. Needs root and the zram module.
#
#   scripts/zram-device.sh setup [SIZE_GIB]   # default 1; prints the device's path
#   scripts/zram-device.sh teardown
#
# Then, for example:
#   dbaio bench --filename /dev/zram0 --size 1G --direct --io-method worker --io-workers 8
#   scripts/vs-fio.sh --method worker --file /dev/zram0 --size 1G
set -euo pipefail
dev=/dev/zram0 sys=/sys/block/zram0
case ${1:-} in
  setup)
    gib=${2:-1}
    [[ $EUID -eq 0 ]] || { echo "zram-device: needs root" >&2; exit 2; }
    [[ -e $sys ]] || { echo "zram-device: no $dev (modprobe zram)" >&2; exit 2; }
    if [[ $(cat "$sys/disksize") == 0 ]]; then
      echo "${gib}G" > "$sys/disksize"
      dd if=/dev/urandom of="$dev" bs=1M count=$((gib * 1024)) oflag=direct status=none
    fi
    echo "$dev"
    ;;
  teardown)
    [[ -e $sys ]] && echo 1 > "$sys/reset"
    ;;
  *) sed -n '2,15p' "$0"; exit 2 ;;
esac
