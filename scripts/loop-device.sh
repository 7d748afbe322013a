#!/usr/bin/env bash
# A block device that is the same for every run and every tool: ext4 on a loop device over a
# tmpfs file. No host cache, no throttling, ~10 µs per read; the CPUs, not the device, set
# the pace, as with a fast NVMe drive (docs/benchmarks.md, "A CPU-bound device"). Needs root.
#
#   scripts/loop-device.sh setup [SIZE_GIB]   # default 3; prints the data file's path
#   scripts/loop-device.sh teardown
#
# Then, for example:
#   scripts/vs-fio.sh --method io_uring --iodepth 32 --file /mnt/dbaio-loop/data.dat --size 2G
# or, steadier (no ext4 extent lookups; read-only workloads only), the device itself:
#   scripts/vs-fio.sh --method io_uring --file "$(findmnt -n -o SOURCE /mnt/dbaio-loop)" --size 2G
set -euo pipefail
img=/dev/shm/dbaio-loop.img mnt=/mnt/dbaio-loop
case ${1:-} in
  setup)
    gib=${2:-3}
    [[ $EUID -eq 0 ]] || { echo "loop-device: needs root (losetup, mount)" >&2; exit 2; }
    if mountpoint -q "$mnt"; then echo "$mnt/data.dat"; exit 0; fi
    truncate -s "${gib}G" "$img"
    dev=$(losetup -f --show "$img")
    mkfs.ext4 -q -F "$dev"
    mkdir -p "$mnt"
    mount "$dev" "$mnt"
    # Two thirds of the file system, written through the device (O_DIRECT), as benchmarks
    # read it; /dev/urandom so nothing compresses or dedups.
    dd if=/dev/urandom of="$mnt/data.dat" bs=1M count=$((gib * 1024 * 2 / 3)) oflag=direct \
       status=none
    echo "$mnt/data.dat"
    ;;
  teardown)
    if mountpoint -q "$mnt"; then
      dev=$(findmnt -n -o SOURCE "$mnt")
      umount "$mnt"
      losetup -d "$dev"
    fi
    rm -f "$img"
    ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
