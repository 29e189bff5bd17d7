#!/usr/bin/env bash
# bench/run.sh: proxyDHCP and TFTP benchmarks, siteboot against dnsmasq, in
# the same run on the same namespaces (issue 2 item 9; bench/README.md).
#
#   sudo bench/run.sh [-d DURATION] [-n ENTRIES] [-r ROUNDS] [-s "dhcp tftp"] [-t "dnsmasq siteboot"] [-l LEVEL] [-o OUTDIR]
#
# DHCP: dhcpload (bench/dhcpload) in the client namespace sends PXE
# DISCOVERs to the target in the server namespace: 500 from unknown MACs
# (must get no offer), then from the ENTRIES known MACs closed-loop at
# -outstanding 32 and open-loop at -rate 1000. TFTP: 50 concurrent curl
# fetches of ipxe.efi at blksize 1468 and 512, each file checked by sha256.
# Targets alternate (dnsmasq, siteboot, dnsmasq, ...) for ROUNDS rounds so
# background load hits both alike; the summary reports medians and ratios.
# siteboot gets the ENTRIES MACs as entries (256 per `entry add`, one node
# each) on a fresh data dir at every start, in its default configuration
# (log.level info) unless -l sets log.level. SITEBOOT_BIN=path skips the
# build of ./cmd/siteboot. Traffic stays on the lab bridge; the EXIT trap
# removes the lab. Reproduce BENCHMARKS.md: sudo bench/run.sh -r 5 -d 10s
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

DURATION=10s
ENTRIES=10000
ROUNDS=5
OUTSTANDING=32
RATE=1000
TFTP_CLIENTS=50
TFTP_FILE=ipxe.efi
BOOT_DIR=/usr/lib/ipxe
TARGETS="dnsmasq siteboot"
SUITES="dhcp tftp"
OUT=""
LOG_LEVEL=""
KNOWN_PREFIX=02:5b
UNKNOWN_PREFIX=02:5c
MACS_PER_CALL=256

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }

[ "${1:-}" = --help ] && { usage; exit 0; }
while getopts "d:n:r:s:t:l:o:h" opt; do
  case $opt in
    d) DURATION=$OPTARG ;;
    n) ENTRIES=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    s) SUITES=$OPTARG ;;
    t) TARGETS=$OPTARG ;;
    l) LOG_LEVEL=$OPTARG ;;
    o) OUT=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/sbt-bench-$(date +%Y%m%d-%H%M%S)}
ROUND=0

preflight() {
  [ "$(id -u)" = 0 ] || { echo "run.sh: needs root (network namespaces)" >&2; exit 2; }
  local b
  for b in ip dnsmasq curl jq flock sha256sum timeout go; do
    command -v "$b" >/dev/null || { echo "run.sh: needs $b in PATH" >&2; exit 2; }
  done
  [ -r "$BOOT_DIR/$TFTP_FILE" ] || { echo "run.sh: needs $BOOT_DIR/$TFTP_FILE (Debian ipxe)" >&2; exit 2; }
  [[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "run.sh: -r $ROUNDS: want 1..99" >&2; exit 2; }
  local s
  for s in $SUITES; do
    [ "$s" = dhcp ] || [ "$s" = tftp ] || { echo "run.sh: -s: unknown suite $s (dhcp, tftp)" >&2; exit 2; }
  done
  mkdir -p "$OUT"
}

cleanup() { lab_down; }

# ---------------------------------------------------------------- targets --
# start_<target>_dhcp / start_<target>_tftp start a server in $SRV_NS and set
# TARGET_PID; they return 3 when the target is not available (skipped).

start_dnsmasq_dhcp() {
  local conf="$OUT/dnsmasq-proxy.conf"
  {
    echo "port=0"
    echo "interface=eth0"
    echo "bind-interfaces"
    echo "user=root"
    echo "quiet-dhcp"
    echo "dhcp-range=$LAB_NET.0,proxy"
    echo "dhcp-leasefile=$OUT/dnsmasq-proxy.leases"
    echo "pid-file=$OUT/dnsmasq-proxy.pid"
    echo "log-facility=$OUT/dnsmasq-proxy.log"
    echo "pxe-service=x86PC,\"siteboot bench\",undionly"
    echo "pxe-service=X86-64_EFI,\"siteboot bench\",ipxe.efi"
    echo "dhcp-ignore=tag:!known"
    sed 's/.*/dhcp-host=&,set:known/' "$OUT/known-macs.txt"
  } > "$conf"
  rm -f "$OUT/dnsmasq-proxy.log"
  start_bg "$SRV_NS" "$OUT/dnsmasq-proxy.out" dnsmasq --keep-in-foreground --conf-file="$conf"
  TARGET_PID=$BG_PID
  wait_for_file "$OUT/dnsmasq-proxy.log" "started, version" 10
}

start_dnsmasq_tftp() {
  rm -f "$OUT/dnsmasq-tftp.log"
  start_bg "$SRV_NS" "$OUT/dnsmasq-tftp.out" dnsmasq --keep-in-foreground --conf-file=/dev/null \
    --port=0 --user=root --interface=eth0 --bind-interfaces --enable-tftp --tftp-root="$BOOT_DIR" \
    --tftp-max=64 --pid-file="$OUT/dnsmasq-tftp.pid" --log-facility="$OUT/dnsmasq-tftp.log"
  TARGET_PID=$BG_PID
  wait_for_file "$OUT/dnsmasq-tftp.log" "started, version" 10
}

# >>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>>
# SITEBOOT SLOT. boot_files.dir is BOOT_DIR, the directory dnsmasq serves.
# Builds before 462ba2b dropped the /boot link root when boot_files.dir was
# set explicitly, so Debian's ipxe.efi symlink (to /boot/ipxe.efi) was
# skipped and every TFTP fetch of it got "file not found": the 0/50 of the
# first runs. start_siteboot_tftp checks `status` lists the file first.
# The default log level (info) is what a site runs, so it is what is
# measured (issue 15: at most one line per machine and boot stage); -l warn
# matches dnsmasq's quiet-dhcp for comparison with older runs.
SB_DATA=""
SB_SOCK=""

siteboot_build() {
  if [ -z "${SITEBOOT_BIN:-}" ]; then
    SITEBOOT_BIN="$OUT/siteboot"
    (cd "$REPO" && go build -o "$SITEBOOT_BIN" ./cmd/siteboot)
  fi
  [ -x "$SITEBOOT_BIN" ] || { echo "run.sh: SITEBOOT_BIN $SITEBOOT_BIN is not executable" >&2; exit 2; }
}

write_siteboot_config() {
  SB_DATA="$OUT/siteboot-data"
  SB_SOCK="$SB_DATA/siteboot.sock"
  rm -rf "$SB_DATA"
  mkdir -p "$SB_DATA"
  local LOG_YAML=""
  [ -z "$LOG_LEVEL" ] || printf -v LOG_YAML 'log:\n  level: %s' "$LOG_LEVEL"
  cat > "$OUT/siteboot.yaml" <<YAML
site_id: bench
node_id: bench-1
data_dir: $SB_DATA
admin:
  socket: $SB_SOCK
$LOG_YAML
http:
  listen: $SRV_IP:8080
  advertise: http://$SRV_IP:8080
dhcp:
  enabled: true
  interfaces: [eth0]
  advertise_ip: $SRV_IP
tftp:
  listen: $SRV_IP:69
  max_block_size: 1468
  # The 50 TFTP clients stand for 50 machines but share the client
  # namespace's one address; real machines each have their own.
  max_per_source: 64
boot_files:
  dir: $BOOT_DIR
ramdisk:
  # the benchmark fetches no kernel; scripts only need URLs here
  kernel: http://$SRV_IP:8080/bench/vmlinuz
  initrd: http://$SRV_IP:8080/bench/initrd
YAML
}

# sb ARGS...: the siteboot CLI against the benchmark appliance's socket.
sb() { "$SITEBOOT_BIN" --socket "$SB_SOCK" "$@"; }

start_siteboot_common() {
  write_siteboot_config
  start_bg "$SRV_NS" "$OUT/siteboot-r$ROUND-$1.log" "$SITEBOOT_BIN" serve --config "$OUT/siteboot.yaml"
  TARGET_PID=$BG_PID
  local i
  for i in $(seq 100); do
    in_ns "$CLI_NS" curl -sf -o /dev/null "http://$SRV_IP:8080/readyz" && return 0
    kill -0 "$TARGET_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "siteboot did not become ready; log: $OUT/siteboot-r$ROUND-$1.log" >&2
  return 1
}

# load_siteboot_entries: known-macs.txt as entries, MACS_PER_CALL per node
# and call; checks that exactly ENTRIES are live afterwards.
load_siteboot_entries() {
  local macs=() mac i node args start end live
  mapfile -t macs < "$OUT/known-macs.txt"
  start=$(date +%s.%N)
  for ((i = 0; i < ${#macs[@]}; i += MACS_PER_CALL)); do
    printf -v node 'node-%04d' $((i / MACS_PER_CALL + 1))
    args=()
    for mac in "${macs[@]:i:MACS_PER_CALL}"; do args+=(--mac "$mac"); done
    sb -o json entry add --node-id "$node" --arch x86_64-efi "${args[@]}" > /dev/null
  done
  end=$(date +%s.%N)
  live=$(sb -o json status | jq -r '.liveEntries // 0')
  printf 'siteboot: %s entries loaded in %.2f s (%d calls), %s live\n' "${#macs[@]}" \
    "$(echo "$end - $start" | bc -l)" $(((${#macs[@]} + MACS_PER_CALL - 1) / MACS_PER_CALL)) "$live" >&2
  [ "$live" = "${#macs[@]}" ] || { echo "siteboot: want ${#macs[@]} live entries, have $live" >&2; return 1; }
}

start_siteboot_dhcp() {
  start_siteboot_common dhcp || return $?
  load_siteboot_entries
}

start_siteboot_tftp() {
  start_siteboot_common tftp || return $?
  sb -o json status | jq -e --arg f "$TFTP_FILE" '[.bootFiles[]?.name] | index($f) != null' > /dev/null ||
    { echo "siteboot: does not serve $TFTP_FILE (see $OUT/siteboot-r$ROUND-tftp.log)" >&2; return 1; }
}
# <<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<

# ------------------------------------------------------------------ suites --

# record TARGET TEST FIELDS...: one line of results.tsv, tagged with ROUND.
record() { local IFS=$'\t'; printf '%s\t%s\n' "$ROUND" "$*" >> "$OUT/results.tsv"; }

# run_load TARGET NAME ARGS...: one dhcpload run from the client namespace.
run_load() {
  local t=$1 name=$2 json="$OUT/dhcp-r$ROUND-$1-$2.json"; shift 2
  timeout 900 ip netns exec "$CLI_NS" "$DHCPLOAD" -label "r$ROUND $t $name" -server-id "$SRV_IP" -json "$@" > "$json"
  jq -r '"\(.label): sent \(.sent), offers \(.offers) (\(.offers_per_s|floor)/s), lost \(.loss_pct)%, p50 \(.latency.p50_ms) ms, p99 \(.latency.p99_ms) ms, max \(.latency.max_ms) ms"' "$json" >&2
  record "$t" "dhcp-$name" "$(jq -r '[.sent,.offers,(.offers_per_s|floor),.loss_pct,.latency.p50_ms,.latency.p90_ms,.latency.p99_ms,.latency.max_ms]|@tsv' "$json")"
}

dhcp_suite() {
  local t=$1 rc=0
  "start_${t}_dhcp" || rc=$?
  if [ "$rc" != 0 ]; then
    stop_target
    [ "$rc" = 3 ] && return 0
    return "$rc"
  fi
  run_load "$t" unknown -mac-prefix "$UNKNOWN_PREFIX" -mac-count 1000 -outstanding 32 -requests 500 -timeout 200ms
  local stray
  stray=$(jq .offers "$OUT/dhcp-r$ROUND-$t-unknown.json")
  [ "$stray" = 0 ] || echo "WARNING: $t offered $stray times to unknown MACs" >&2
  local cpu0 cpu1
  cpu0=$(cpu_seconds "$TARGET_PID")
  run_load "$t" closed -macs "$OUT/known-macs.txt" -outstanding "$OUTSTANDING" -duration "$DURATION"
  cpu1=$(cpu_seconds "$TARGET_PID")
  # server CPU per answered request in the closed-loop run, in microseconds
  record "$t" cpu-us-per-offer "$(awk -v a="$cpu0" -v b="$cpu1" -v n="$(jq .offers "$OUT/dhcp-r$ROUND-$t-closed.json")" \
    'BEGIN {printf "%.1f", (b - a) * 1e6 / (n > 0 ? n : 1)}')"
  run_load "$t" open -macs "$OUT/known-macs.txt" -rate "$RATE" -duration "$DURATION"
  record "$t" udp-drops "$(udp_drops)"
  stop_target
}

# udp_drops: the kernel's drops (last column of /proc/net/udp) summed over
# the server namespace's sockets on ports 67 and 4011, whoever owns them:
# requests that never reached the server.
udp_drops() {
  in_ns "$SRV_NS" cat /proc/net/udp | awk 'NR > 1 {split($2, a, ":"); if (a[2] == "0043" || a[2] == "0FAB") d += $NF} END {print d + 0}'
}

# cpu_seconds PID: utime+stime of the server under PID (ip netns exec
# execs, so PID is the server itself), in seconds.
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz}' "/proc/$1/stat" 2>/dev/null || echo NaN
}

# tftp_batch TARGET BLKSIZE: TFTP_CLIENTS concurrent fetches, timed, checked.
tftp_batch() {
  local t=$1 blk=$2 dir="$OUT/tftp-$1-$2" start end ok=0 want f
  rm -rf "$dir"; mkdir -p "$dir"
  local cpu0 cpu1
  cpu0=$(cpu_seconds "$TARGET_PID")
  start=$(date +%s.%N)
  timeout 180 ip netns exec "$CLI_NS" bash -c '
    for i in $(seq "$1"); do
      curl -s --max-time 60 --tftp-blksize "$2" -o "$3/$i" "tftp://$4/$5" &
    done
    wait' _ "$TFTP_CLIENTS" "$blk" "$dir" "$SRV_IP" "$TFTP_FILE" || true
  end=$(date +%s.%N)
  cpu1=$(cpu_seconds "$TARGET_PID")
  want=$(sha256sum < "$BOOT_DIR/$TFTP_FILE" | cut -d' ' -f1)
  for f in "$dir"/*; do
    [ -f "$f" ] || continue
    [ "$(sha256sum < "$f" | cut -d' ' -f1)" = "$want" ] && ok=$((ok + 1))
  done
  local secs; secs=$(echo "$end - $start" | bc -l)
  local cpu; cpu=$(awk -v a="$cpu0" -v b="$cpu1" 'BEGIN {printf "%.2f", b - a}')
  printf 'r%s %s tftp blksize %s: %d/%d intact in %.3f s, server CPU %s s\n' "$ROUND" "$t" "$blk" "$ok" "$TFTP_CLIENTS" "$secs" "$cpu" >&2
  record "$t" "tftp-$blk" "$ok" "$TFTP_CLIENTS" "$(printf '%.3f' "$secs")" "$cpu"
}

tftp_suite() {
  local t=$1 rc=0
  "start_${t}_tftp" || rc=$?
  if [ "$rc" != 0 ]; then
    stop_target
    [ "$rc" = 3 ] && return 0
    return "$rc"
  fi
  tftp_batch "$t" 1468
  tftp_batch "$t" 512
  stop_target
}

stop_target() {
  [ -n "${TARGET_PID:-}" ] && stop_bg "$TARGET_PID"
  TARGET_PID=""
}

# median TARGET TEST COLUMN and paired NUM DEN TEST COLUMN over results.tsv
# (1 round, 2 target, 3 test, 4.. fields); see tsv_median and tsv_paired.
median() { tsv_median "$OUT/results.tsv" "$1" "$2" "$3"; }
paired() { tsv_paired "$OUT/results.tsv" 3 "$3" 2 "$1" "$2" "$4"; }

summary() {
  tsv_show "$OUT/results.tsv"
  echo
  echo "== medians over $ROUNDS rounds =="
  local t
  for t in $TARGETS; do
    printf '%-9s closed: %s offers/s p50 %s ms p99 %s ms, %s us CPU/offer | open %s/s: %s offers/s loss %s%% p50 %s ms p99 %s ms | tftp 1468: %s s (CPU %s s), 512: %s s (CPU %s s)\n' \
      "$t" "$(median "$t" dhcp-closed 6)" "$(median "$t" dhcp-closed 8)" "$(median "$t" dhcp-closed 10)" "$(median "$t" cpu-us-per-offer 4)" \
      "$RATE" "$(median "$t" dhcp-open 6)" "$(median "$t" dhcp-open 7)" "$(median "$t" dhcp-open 8)" "$(median "$t" dhcp-open 10)" \
      "$(median "$t" tftp-1468 6)" "$(median "$t" tftp-1468 7)" "$(median "$t" tftp-512 6)" "$(median "$t" tftp-512 7)"
  done
  local d s
  d=$(median dnsmasq dhcp-closed 6); s=$(median siteboot dhcp-closed 6)
  [ -n "$d" ] && [ -n "$s" ] && awk -v s="$s" -v d="$d" 'BEGIN{printf "offers/s siteboot/dnsmasq: %.2fx (target >= 4x in the default config, issue 15)\n", s/d}'
  for t in $TARGETS; do
    d=$(median "$t" udp-drops 4)
    [ -n "$d" ] && echo "$t: requests dropped by the kernel on ports 67/4011 per round, median: $d"
  done
  s=$(median siteboot dhcp-open 10)
  [ -n "$s" ] && awk -v s="$s" -v r="$RATE" 'BEGIN{printf "siteboot p99 at %d req/s: %.3f ms (target <= 1 ms)\n", r, s}'
  d=$(paired siteboot dnsmasq dhcp-closed 6)
  [ -n "$d" ] && echo "offers/s siteboot/dnsmasq, median of per-round ratios: ${d}x"
  local blk
  for blk in 1468 512; do
    d=$(median dnsmasq "tftp-$blk" 6); s=$(median siteboot "tftp-$blk" 6)
    [ -n "$d" ] && [ -n "$s" ] && awk -v s="$s" -v d="$d" -v b="$blk" 'BEGIN{printf "TFTP speed siteboot/dnsmasq at blksize %d: %.2fx (target >= 1.0x)\n", b, d/s}'
    d=$(paired dnsmasq siteboot "tftp-$blk" 6)
    [ -n "$d" ] && echo "TFTP speed siteboot/dnsmasq at blksize $blk, median of per-round ratios: ${d}x; server CPU siteboot/dnsmasq $(paired siteboot dnsmasq "tftp-$blk" 7)x"
  done
  return 0
}

main() {
  preflight
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  DHCPLOAD="$OUT/dhcpload"
  (cd "$REPO" && go build -o "$DHCPLOAD" ./bench/dhcpload)
  case " $TARGETS " in *" siteboot "*) siteboot_build ;; esac
  "$DHCPLOAD" -mac-prefix "$KNOWN_PREFIX" -mac-count "$ENTRIES" -print-macs > "$OUT/known-macs.txt"
  printf 'round\ttarget\ttest\tsent|ok\toffers|clients\toffers_per_s|secs\tloss_pct|cpu_s\tp50_ms\tp90_ms\tp99_ms\tmax_ms\n' > "$OUT/results.tsv"
  lab_up
  for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    echo "== round $ROUND/$ROUNDS ($(cut -d' ' -f1-3 /proc/loadavg) load) ==" >&2
    local t s
    for s in $SUITES; do
      for t in $TARGETS; do "${s}_suite" "$t"; done
    done
  done
  summary
}

main "$@"
