#!/usr/bin/env bash
# bench/storm.sh: a boot storm, siteboot in its default configuration against
# dnsmasq (proxyDHCP + TFTP) with nginx, in one run on the same namespaces
# (issue 15).
#
#   sudo bench/storm.sh [-n "100 500 1000"] [-b "262144 0"] [-r ROUNDS]
#                       [-k KERNEL_MIB] [-i INITRD_MIB] [-w WINDOW]
#                       [-L "1gbit:100 10gbit:500"] [-t "anchor siteboot"]
#                       [-V "seabios ovmf"] [-T MACHINE_TIMEOUT] [-A BINARY] [-o OUTDIR]
#
# The storm is bench/storm (go run ./bench/storm -help): N machines, half
# BIOS and half x86-64 UEFI, their starts spread over WINDOW (3s), each
# doing what firmware and iPXE do: PXE DISCOVER, the first stage by TFTP
# (blksize 1468), iPXE's DISCOVER, /boot.ipxe and what it chains, then a
# KERNEL_MIB (10) kernel and an INITRD_MIB (64) initrd over HTTP, each
# machine on its own connections from one of 240 client addresses. -b lists
# the HTTP receive buffers to run: 262144 is iPXE's fixed 256 KiB window,
# 0 lets Linux autotune it, as installers and UEFI HTTP boot do.
#
# The two servers, alternating (order swapped every round), on the same
# server namespace and ports:
#   siteboot  `siteboot serve` with its embedded defaults plus data_dir and
#             a ramdisk profile naming the kernel and initrd by SHA-256 (its
#             cache pulled them once, from an origin nginx on the server's
#             loopback); one boot entry per machine. proxyDHCP, TFTP and
#             HTTP are its defaults (every up interface, :69, :8080).
#   anchor    dnsmasq 2.90 as proxyDHCP + TFTP (the first stages from
#             /usr/lib/ipxe, tftp-max raised to 1024, quiet-dhcp and
#             quiet-tftp, only the storm's MACs answered) and nginx on :8080
#             (sendfile, tcp_nopush, a worker per CPU, no access log)
#             serving a static /boot.ipxe and the same kernel and initrd
#             files (siteboot's verified blobs), as a site builds it by hand.
# Each run starts its server(s) fresh, records a baseline, runs the storm
# in the client namespace and records: machines done, failures by step,
# completion (first start to last initrd), p50/p99/max per machine, the
# DHCP and first-stage p99, server CPU seconds and peak RSS, log lines, the
# server's DHCP socket drops, the host's peak TCP memory and the TCP
# retransmission timeouts and receive-queue drops in both namespaces, the
# server's retransmitted segments and tail loss probes; for
# siteboot also goroutines and open fds before the storm and after it.
#
# -L adds runs with the server's link shaped (tc htb on the server's eth0,
# RATE:N pairs, default none; "1gbit:100 10gbit:500" is the table's) and
# reports completion against the line-rate limit N x bytes / rate.
# -V "seabios ovmf" lets one real QEMU VM of each firmware (TCG) join the
# last storm of each target at the largest N: they PXE-boot from the server
# under test (address from a separate dnsmasq, the site's ordinary DHCP,
# that answers only them) and must fetch their kernel and initrd.
#
# -A BINARY adds the target "alt": siteboot from another build, on the same
# data dir, to compare two builds in one run (-t "siteboot alt").
# SITEBOOT_BIN=path and STORM_BIN=path skip the builds. Traffic stays in the lab; the
# EXIT trap stops every server and VM and removes the lab. Every storm is
# bounded (-T per machine, 10 minutes per run). Output: OUTDIR/results.tsv,
# OUTDIR/storm-*.json and a summary table. Reproduce BENCHMARKS.md section G:
#   sudo bench/storm.sh -r 2 -L "1gbit:100 10gbit:500" -V "seabios ovmf"
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

NS="100 500 1000"
RCVBUFS="262144 0"
ROUNDS=1
KERNEL_MIB=10
INITRD_MIB=64
WINDOW=3s
SHAPED=""
TARGETS="anchor siteboot"
VMS=""
ALT_BIN=""
MACHINE_TIMEOUT=120s
OUT=""
HTTP_PORT=8080
ORIGIN_PORT=8081
BOOT_DIR=/usr/lib/ipxe
SRC_FIRST=10
SRC_LAST=249
VM_FIRST=250

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }

[ "${1:-}" = --help ] && { usage; exit 0; }
while getopts "n:b:r:k:i:w:L:t:V:T:A:o:h" opt; do
  case $opt in
    n) NS=$OPTARG ;;
    b) RCVBUFS=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    k) KERNEL_MIB=$OPTARG ;;
    i) INITRD_MIB=$OPTARG ;;
    w) WINDOW=$OPTARG ;;
    L) SHAPED=$OPTARG ;;
    t) TARGETS=$OPTARG ;;
    V) VMS=$OPTARG ;;
    T) MACHINE_TIMEOUT=$OPTARG ;;
    A) ALT_BIN=$OPTARG ;;
    o) OUT=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/sbt-storm-$(date +%Y%m%d-%H%M%S)}

die() { echo "storm.sh: $*" >&2; exit 2; }

preflight() {
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
  local b n r s t v
  for b in ip tc nginx dnsmasq curl jq flock sha256sum timeout go bc; do
    command -v "$b" >/dev/null || die "needs $b in PATH"
  done
  [ -r "$BOOT_DIR/undionly.kpxe" ] && [ -r "$BOOT_DIR/ipxe.efi" ] || die "needs $BOOT_DIR/undionly.kpxe and ipxe.efi (Debian ipxe)"
  [[ $ROUNDS =~ ^[1-9]$ ]] || die "-r $ROUNDS: want 1..9"
  for n in $NS; do [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 2000 ] || die "-n $n: want 1..2000"; done
  for r in $RCVBUFS; do [[ $r =~ ^[0-9]+$ ]] && [ "$r" -le $((64 << 20)) ] || die "-b $r: want 0..67108864 (0: autotune)"; done
  for b in "$KERNEL_MIB" "$INITRD_MIB"; do [[ $b =~ ^[0-9]+$ ]] && [ "$b" -ge 1 ] && [ "$b" -le 1024 ] || die "-k/-i $b: want 1..1024 (MiB)"; done
  for s in $SHAPED; do [[ $s =~ ^[0-9]+[mg]bit:[0-9]+$ ]] || die "-L $s: want RATE:N like 1gbit:100"; done
  for t in $TARGETS; do [[ $t == anchor || $t == siteboot || ($t == alt && -n $ALT_BIN) ]] || die "-t $t: want anchor, siteboot or (with -A) alt"; done
  [ -z "$ALT_BIN" ] || [ -x "$ALT_BIN" ] || die "-A $ALT_BIN: not an executable"
  for v in $VMS; do
    [[ $v == seabios || $v == ovmf ]] || die "-V $v: want seabios or ovmf"
    command -v qemu-system-x86_64 >/dev/null && command -v python3 >/dev/null || die "-V needs qemu-system-x86_64 and python3"
  done
  [[ " $VMS " != *" ovmf "* ]] || [ -r /usr/share/OVMF/OVMF_CODE_4M.fd ] || die "-V ovmf needs /usr/share/OVMF/OVMF_CODE_4M.fd (ovmf)"
  mkdir -p "$OUT"
}

record() { local IFS=$'\t'; printf '%s\n' "$*" >> "$OUT/results.tsv"; }

# --- the two servers ---------------------------------------------------------

nginx_conf() { # DIR LISTEN BODY
  cat <<CONF
daemon off;
master_process on;
user root;
worker_processes auto;
worker_rlimit_nofile 8192;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
  sendfile on;
  tcp_nopush on;
  keepalive_requests 10000;
  keepalive_timeout 120s;
  access_log off;
  default_type application/octet-stream;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  server { listen $2; $3 }
}
CONF
}

# start_nginx NAME LISTEN BODY URL NS: sets BG_PID once URL answers from NS.
start_nginx() {
  local d="$OUT/nginx-$1"
  mkdir -p "$d"
  nginx_conf "$d" "$2" "$3" > "$d/nginx.conf"
  start_bg "$SRV_NS" "$d/stderr.log" nginx -p "$d" -c "$d/nginx.conf"
  wait_http "$4" "$5"
}

wait_http() { # URL NS
  local i
  for i in $(seq 100); do
    in_ns "$2" curl -sfI -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "storm.sh: $1 did not answer" >&2
  return 1
}

# The anchor's dnsmasq: proxyDHCP (firmware gets the first stage by TFTP,
# iPXE the script URL) and TFTP from BOOT_DIR, answering only the storm's
# machines, as a site configures it for a boot storm: enough TFTP slots for
# every machine at once, routine logging off. dhcp-boot names the next
# server too (",,SRV"): BIOS iPXE ignores a ProxyDHCP answer without one
# and would never get the script (bench/storm/dnsmasq_test.go).
anchor_dnsmasq_conf() {
  cat <<CONF
port=0
interface=eth0
bind-interfaces
user=root
dhcp-range=$LAB_NET.0,proxy
dhcp-leasefile=$OUT/anchor-dnsmasq.leases
pid-file=$OUT/anchor-dnsmasq.pid
log-facility=$OUT/anchor-dnsmasq.log
quiet-dhcp
quiet-tftp
dhcp-userclass=set:ipxe,iPXE
pxe-service=tag:!ipxe,x86PC,"boot",undionly.kpxe
pxe-service=tag:!ipxe,X86-64_EFI,"boot",ipxe.efi
dhcp-boot=tag:ipxe,http://$SRV_IP:$HTTP_PORT/boot.ipxe,,$SRV_IP
enable-tftp
tftp-root=$BOOT_DIR
tftp-max=1024
dhcp-ignore=tag:!known
CONF
  { cat "$OUT/macs.txt"; vm_macs; } | sed 's/.*/dhcp-host=&,set:known/'
}

ANCHOR_PIDS=()
start_anchor() {
  anchor_dnsmasq_conf > "$OUT/anchor-dnsmasq.conf"
  : > "$OUT/anchor-dnsmasq.log"
  start_bg "$SRV_NS" "$OUT/anchor-dnsmasq.out" dnsmasq --keep-in-foreground --conf-file="$OUT/anchor-dnsmasq.conf"
  local dpid=$BG_PID
  wait_for_file "$OUT/anchor-dnsmasq.log" "started, version" 10
  start_nginx anchor "$SRV_IP:$HTTP_PORT" "root $OUT/www;" "http://$SRV_IP:$HTTP_PORT/boot.ipxe" "$CLI_NS"
  ANCHOR_PIDS=("$dpid" "$BG_PID")
  SERVER_PIDS="$dpid $BG_PID"
  SERVER_LOGS="$OUT/anchor-dnsmasq.log $OUT/nginx-anchor/error.log"
}

stop_anchor() {
  local p
  for p in "${ANCHOR_PIDS[@]}"; do stop_bg "$p"; done
  ANCHOR_PIDS=()
}

SB_PID=""
SB_DATA=""
siteboot_conf() {
  cat <<YAML
site_id: storm
node_id: storm-1
data_dir: $SB_DATA
ramdisk:
  kernel: sha256:$KERNEL_SHA
  initrd: sha256:$INITRD_SHA
  cmdline: console=ttyS0
YAML
}

start_siteboot() { # LOG [BINARY]
  start_bg "$SRV_NS" "$1" "${2:-$SITEBOOT_BIN}" serve --config "$OUT/siteboot.yaml"
  SB_PID=$BG_PID
  wait_http "http://$SRV_IP:$HTTP_PORT/readyz" "$CLI_NS"
  wait_for_file "$1" "boot lease" 20 >/dev/null 2>&1 || true
  SERVER_PIDS=$SB_PID
  SERVER_LOGS=$1
}

stop_siteboot() { [ -z "$SB_PID" ] || stop_bg "$SB_PID"; SB_PID=""; }

sb() { "$SITEBOOT_BIN" --socket "$SB_DATA/siteboot.sock" "$@"; }

# metric NAME: a siteboot metric's value (sum over its series), from the
# client namespace.
metric() {
  in_ns "$CLI_NS" curl -sf "http://$SRV_IP:$HTTP_PORT/metrics" |
    awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2; f = 1} END {if (f) printf "%d\n", s; else print ""}'
}

# --- set-up --------------------------------------------------------------------

setup() {
  if [ -z "${SITEBOOT_BIN:-}" ]; then
    SITEBOOT_BIN="$OUT/siteboot"
    (cd "$REPO" && go build -o "$SITEBOOT_BIN" ./cmd/siteboot)
  fi
  if [ -z "${STORM_BIN:-}" ]; then
    STORM_BIN="$OUT/storm"
    (cd "$REPO" && go build -o "$STORM_BIN" ./bench/storm)
  fi
  local maxn=0 n
  for n in $NS; do [ "$n" -gt "$maxn" ] && maxn=$n; done
  for n in $SHAPED; do n=${n#*:}; [ "$n" -gt "$maxn" ] && maxn=$n; done
  MAXN=$maxn

  mkdir -p "$OUT/origin" "$OUT/www"

  # The machines: every N of the run is a prefix of the largest.
  "$STORM_BIN" -n "$MAXN" -print-machines > "$OUT/machines.tsv"
  cut -f1 "$OUT/machines.tsv" > "$OUT/macs.txt"

  lab_up
  # The machines' addresses: 240 on the client's interface (machine i takes
  # the (i mod 240)-th), the server's TFTP bounding transfers per address as
  # it should; the VMs get theirs from the site DHCP above them.
  local i
  for ((i = SRC_FIRST; i <= SRC_LAST; i++)); do echo "addr add $LAB_NET.$i/24 dev eth0"; done > "$OUT/addrs.batch"
  ip -n "$CLI_NS" -batch "$OUT/addrs.batch"
  SRC_IPS="$LAB_NET.$SRC_FIRST-$LAB_NET.$SRC_LAST"
  # The kernel is an iPXE script padded to KERNEL_MIB with comment lines:
  # iPXE's `kernel` must recognise the image or the script stops before its
  # initrd line, and a script is an image both BIOS and EFI iPXE run. A
  # real VM that ran it (after both fetches) tells the lab's sink, which
  # neither server under test is.
  SINK="$LAB_NET.1:8099"
  printf '#!ipxe\necho storm: kernel and initrd fetched\nimgfetch http://%s/done?mac=${net0/mac:hexhyp} ||\nsleep 3600\n' "$SINK" > "$OUT/origin/vmlinuz"
  local pad=$(((KERNEL_MIB << 20) - $(stat -c %s "$OUT/origin/vmlinuz")))
  head -c $((pad * 3 / 4)) /dev/urandom | base64 -w 63 | sed 's/^/#/' > "$OUT/origin/pad"
  head -c "$pad" "$OUT/origin/pad" >> "$OUT/origin/vmlinuz"
  rm -f "$OUT/origin/pad"
  [ "$(stat -c %s "$OUT/origin/initrd" 2>/dev/null)" = $((INITRD_MIB << 20)) ] ||
    head -c $((INITRD_MIB << 20)) /dev/urandom > "$OUT/origin/initrd"
  KERNEL_SHA=$(sha256sum < "$OUT/origin/vmlinuz" | cut -d' ' -f1)
  INITRD_SHA=$(sha256sum < "$OUT/origin/initrd" | cut -d' ' -f1)

  start_nginx origin "127.0.0.1:$ORIGIN_PORT" "root $OUT/origin;" "http://127.0.0.1:$ORIGIN_PORT/vmlinuz" "$SRV_NS"

  SB_DATA="$OUT/siteboot-data"
  rm -rf "$SB_DATA"
  siteboot_conf > "$OUT/siteboot.yaml"
  start_siteboot "$OUT/siteboot-setup.log"
  sb image add --url "http://127.0.0.1:$ORIGIN_PORT/vmlinuz" --sha256 "$KERNEL_SHA" --format raw > /dev/null
  sb image add --url "http://127.0.0.1:$ORIGIN_PORT/initrd" --sha256 "$INITRD_SHA" --format raw > /dev/null
  sb --timeout 10m image pull --wait > /dev/null
  # One node per 200 MACs (the firmware says the arch), the VMs' own.
  local args=() node=0 mac
  while read -r mac; do
    args+=(--mac "$mac")
    if [ ${#args[@]} -ge 400 ]; then
      sb entry add --node-id "storm-$node" --ttl 24h "${args[@]}" > /dev/null
      node=$((node + 1)); args=()
    fi
  done < <(cat "$OUT/macs.txt"; vm_macs)
  [ ${#args[@]} -eq 0 ] || sb entry add --node-id "storm-$node" --ttl 24h "${args[@]}" > /dev/null
  local live
  live=$(sb -o json status | jq -r '.entries.live // .liveEntries // empty' 2>/dev/null || true)
  echo "siteboot: $(wc -l < "$OUT/macs.txt") machines registered${live:+ ($live live entries)}" >&2
  stop_siteboot

  # The anchor's files: nginx serves siteboot's verified blobs themselves,
  # so both servers read the same page-cache pages.
  ln -sf "$SB_DATA/cache/blobs/sha256/$KERNEL_SHA" "$OUT/www/vmlinuz"
  ln -sf "$SB_DATA/cache/blobs/sha256/$INITRD_SHA" "$OUT/www/initrd"
  cat > "$OUT/www/boot.ipxe" <<IPXE
#!ipxe
kernel http://$SRV_IP:$HTTP_PORT/vmlinuz console=ttyS0 initrd=initrd
initrd http://$SRV_IP:$HTTP_PORT/initrd
boot
IPXE
  cat "$OUT/origin/vmlinuz" "$OUT/origin/initrd" > /dev/null # page cache warm
  BYTES_PER_MACHINE=$(( (KERNEL_MIB << 20) + (INITRD_MIB << 20) ))
}

# --- measuring -----------------------------------------------------------------

# The host's TCP memory in pages (sockstat's "TCP: ... mem N"), and a
# namespace's TCP counters.
tcp_mem_pages() { awk '$1 == "TCP:" {for (i = 2; i < NF; i++) if ($i == "mem") print $(i + 1)}' /proc/net/sockstat; }
nstat_of() { # NS COUNTER...: values of the counters, space-separated
  local ns=$1; shift
  in_ns "$ns" cat /proc/net/netstat /proc/net/snmp | awk -v want="$*" '
    BEGIN {n = split(want, w, " ")}
    /^[A-Za-z]+:/ {if (hdr[$1] == "") {hdr[$1] = $0; next}
      split(hdr[$1], h, " "); for (i = 2; i <= NF; i++) v[h[i]] = $i}
    END {for (i = 1; i <= n; i++) printf "%s%s", (i > 1 ? " " : ""), (w[i] in v ? v[w[i]] : 0); print ""}'
}
udp_drops() { # the server's drops on ports 67 and 4011 (last column of /proc/net/udp)
  in_ns "$SRV_NS" awk 'NR > 1 {split($2, a, ":"); if (a[2] == "0043" || a[2] == "0FAB") d += $NF} END {print d + 0}' /proc/net/udp
}
rss_kib() { # PID...: summed VmRSS of the pids and their children
  local p kids all=""
  for p in "$@"; do
    kids=$(cat /proc/"$p"/task/*/children 2>/dev/null || true)
    all="$all $p $kids"
  done
  # shellcheck disable=SC2086
  for p in $all; do awk '/^VmRSS:/ {print $2}' "/proc/$p/status" 2>/dev/null; done | awk '{s += $1} END {print s + 0}'
}
server_cpu() { local p t=0; for p in $SERVER_PIDS; do t=$((t + $(cpu_ticks "$p"))); done; echo "$t"; }
log_lines() { cat $SERVER_LOGS 2>/dev/null | wc -l; }

# sampler FILE PID...: every 100 ms the summed RSS of the pids and their
# children and the host's TCP memory; the maxima ("KiB pages") are
# rewritten to FILE until FILE.stop exists. One process for the whole
# run: a shell loop forking awk and cat ten times a second cost the
# machine 5 % of its CPU, which the storm needs.
sampler() {
  python3 - "$@" <<'PY'
import glob, os, sys, time
out, pids = sys.argv[1], sys.argv[2:]
maxrss = maxtcp = 0
while not os.path.exists(out + ".stop"):
    procs = set(pids)
    for p in pids:
        for f in glob.glob("/proc/%s/task/*/children" % p):
            try:
                procs.update(open(f).read().split())
            except OSError:
                pass
    rss = 0
    for p in procs:
        try:
            for line in open("/proc/%s/status" % p):
                if line.startswith("VmRSS:"):
                    rss += int(line.split()[1])
        except OSError:
            pass
    tcp = 0
    for line in open("/proc/net/sockstat"):
        f = line.split()
        if f and f[0] == "TCP:" and "mem" in f:
            tcp = int(f[f.index("mem") + 1])
    maxrss, maxtcp = max(maxrss, rss), max(maxtcp, tcp)
    with open(out + ".tmp", "w") as fh:
        fh.write("%d %d\n" % (maxrss, maxtcp))
    os.replace(out + ".tmp", out)
    time.sleep(0.1)
PY
}

# tx_of NS: bytes and packets (skbs: a GSO segment counts once) the
# namespace's eth0 has sent.
tx_of() { in_ns "$1" cat /sys/class/net/eth0/statistics/tx_bytes /sys/class/net/eth0/statistics/tx_packets | paste -sd' '; }

# settle: wait until the last run's sockets have let go of their memory
# (the host's TCP memory under 16 MiB), at most a minute, then 2 s more. A
# run that starts while the previous one's gigabyte of socket memory is
# still being freed is slower, whichever server it is: without this the
# second run of each pair lost 20-30 %.
settle() {
  local i
  for i in $(seq 600); do
    [ "$(tcp_mem_pages)" -lt 4096 ] && break
    sleep 0.1
  done
  sleep 2
}

# storm_run ROUND TARGET N RCVBUF RATE: one storm against TARGET, one row.
storm_run() {
  local round=$1 t=$2 n=$3 rcvbuf=$4 rate=${5:-} tag
  tag="r$round-$t-n$n-b$rcvbuf${rate:+-$rate}"
  local json="$OUT/storm-$tag.json" log="$OUT/siteboot-$tag.log"
  settle
  shape "$rate"
  case $t in
    anchor) start_anchor ;;
    alt) start_siteboot "$log" "$ALT_BIN" ;;
    *) start_siteboot "$log" ;;
  esac
  sleep 1
  local g0="" f0="" g1="" f1="" drops0 drops1 cpu0 cpu1 lines0 lines1 hz
  if [ "$t" != anchor ]; then g0=$(metric go_goroutines); f0=$(metric process_open_fds); fi
  local names="TCPTimeouts TCPRcvQDrop TCPBacklogDrop PruneCalled RcvPruned TCPLossProbes RetransSegs"
  local c0 s0 c1 s1
  c0=$(nstat_of "$CLI_NS" $names); s0=$(nstat_of "$SRV_NS" $names)
  drops0=$(udp_drops); cpu0=$(server_cpu); lines0=$(log_lines)
  rm -f "$OUT/sample.stop"; echo "0 0" > "$OUT/sample"
  # shellcheck disable=SC2086
  sampler "$OUT/sample" $SERVER_PIDS & local spid=$!
  local tx0; tx0=$(tx_of "$SRV_NS")
  local vms=""
  [ -n "${JOIN_VMS:-}" ] && { vms_start "$tag"; vms=$VM_LIST; }
  echo "== $tag (load $(cut -d' ' -f1-3 /proc/loadavg)) ==" >&2
  local rc=0
  timeout 660 ip netns exec "$CLI_NS" "$STORM_BIN" -n "$n" -window "$WINDOW" -iface eth0 -src-ips "$SRC_IPS" \
    -rcvbuf "$rcvbuf" -machine-timeout "$MACHINE_TIMEOUT" -timeout 10m -label "$tag" -json > "$json" 2> "$OUT/storm-$tag.err" || rc=$?
  local vmres=""
  [ -n "$vms" ] && vmres=$(vms_wait "$t")
  cpu1=$(server_cpu); lines1=$(log_lines); drops1=$(udp_drops)
  c1=$(nstat_of "$CLI_NS" $names); s1=$(nstat_of "$SRV_NS" $names)
  touch "$OUT/sample.stop"; wait "$spid" 2>/dev/null || true
  local tx1 skb; tx1=$(tx_of "$SRV_NS")
  skb=$(echo "$tx0 $tx1" | awk '{if ($4 > $2) printf "%d", ($3 - $1) / ($4 - $2); else print "-"}')
  local peak; peak=$(cat "$OUT/sample")
  if [ "$t" != anchor ]; then
    sleep 3 # idle keep-alive connections and finished TFTP transfers end
    g1=$(metric go_goroutines); f1=$(metric process_open_fds)
    in_ns "$CLI_NS" curl -sf "http://$SRV_IP:$HTTP_PORT/metrics" > "$OUT/metrics-$tag.txt" || true
  fi
  if [ "$t" = anchor ]; then stop_anchor; else stop_siteboot; fi
  shape ""
  hz=$(getconf CLK_TCK)
  jq empty "$json" 2>/dev/null || { echo "storm.sh: $tag: storm gave no JSON (exit $rc): $(tail -3 "$OUT/storm-$tag.err")" >&2; return 1; }
  local delta
  delta=$(paste <(echo "$c0 $s0" | tr ' ' '\n') <(echo "$c1 $s1" | tr ' ' '\n') | awk '{printf "%d ", $2 - $1}')
  # shellcheck disable=SC2086
  set -- $delta
  local cli_rto=$1 cli_rcvq=$2 cli_backlog=$3 cli_prune=$4 cli_pruned=$5 srv_rto=$8 srv_probes=${13} srv_retrans=${14}
  local fails
  fails=$(jq -r '[.failures[]? | "\(.step)/\(.reason)=\(.count)"] | join(",")' "$json")
  local line_limit=""
  if [ -n "$rate" ]; then
    local bps; bps=$(echo "$rate" | sed -e 's/gbit$/*1000000000/' -e 's/mbit$/*1000000/' | bc)
    line_limit=$(jq -r --argjson bps "$bps" '.bytes * 8 / $bps' "$json")
  fi
  record "$round" "$t" "$n" "$rcvbuf" "${rate:-none}" \
    "$(jq -r .done "$json")" "$(jq -r .failed "$json")" "${fails:--}" \
    "$(jq -r .completion_s "$json")" "$(jq -r .per_machine.p50_s "$json")" "$(jq -r .per_machine.p99_s "$json")" \
    "$(jq -r .per_machine.max_s "$json")" \
    "$(jq -r '.steps["pxe-dhcp"].p99_s // 0' "$json")" "$(jq -r '.steps["first-stage"].p99_s // 0' "$json")" \
    "$(echo "($cpu1 - $cpu0) / $hz" | bc -l | xargs printf '%.1f')" \
    "$(( ${peak% *} / 1024 ))" "$(( ${peak#* } * 4 / 1024 ))" \
    "$((lines1 - lines0))" "$((drops1 - drops0))" "$cli_rto" "$((cli_rcvq + cli_backlog + cli_pruned))" "$srv_rto" "$srv_retrans" \
    "${g0:--}" "${g1:--}" "${f0:--}" "${f1:--}" "${line_limit:--}" "$(jq -r .client_cpu_s "$json")" "${vmres:--}" "$skb" "$srv_probes" \
    "$(jq -r '.copy_bodies' "$json")"
  tail -n 1 "$OUT/results.tsv" | awk -F'\t' '{printf "   done %s/%s  completion %.2f s  p50 %.2f p99 %.2f max %.2f  dhcp p99 %.3f  tftp p99 %.3f  cpu %s s  rss %s MiB  tcp %s MiB  log %s  rto cli/srv %s/%s  retrans %s (probes %s)  B/skb %s  %s\n",
    $6, $3, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $20, $22, $23, $32, $31, $8}' >&2
}

# shape RATE: the server's egress limited to RATE, or unlimited when RATE
# is empty: an htb class at RATE whose queue is pfifo_fast, Linux's
# default qdisc on a NIC (three bands by packet priority), so that it
# queues as a real interface of that speed would. The class may burst
# 256 KiB: with tc's default burst (about one MTU) htb's timer could not
# keep up with 64 KiB GSO packets, and iperf3 (16 streams, 5 s) moved
# 917 Mbit/s through a 1gbit class and 7.4 Gbit/s through a 10gbit one;
# with 256k, 956 Mbit/s and 9.5 Gbit/s, the TCP/IP payload share of the
# rate (1448 of 1514 bytes).
shape() {
  in_ns "$SRV_NS" tc qdisc del dev eth0 root 2>/dev/null || true
  [ -n "$1" ] || return 0
  in_ns "$SRV_NS" tc qdisc add dev eth0 root handle 1: htb default 1
  in_ns "$SRV_NS" tc class add dev eth0 parent 1: classid 1:1 htb rate "$1" ceil "$1" burst 256k cburst 256k quantum 60000
  in_ns "$SRV_NS" tc qdisc add dev eth0 parent 1:1 handle 10: pfifo_fast
}

# --- real VMs ------------------------------------------------------------------

vm_macs() { local v i=0; for v in $VMS; do printf '52:54:00:5b:00:%02x\n' "$i"; i=$((i + 1)); done; }

VM_PIDS=()
SITE_DHCP_PID=""
VM_TX0=()
VM_T0=0
# vms_start TAG: the site's ordinary DHCP server (answers the VMs only) in
# the bridge's namespace on a port of its own, and one VM per firmware.
vms_start() {
  local tag=$1 v i=0 mac sw="$LAB_ID-sw"
  if [ -z "$SITE_DHCP_PID" ]; then
    ip -n "$sw" addr add "$LAB_NET.1/24" dev br0 2>/dev/null || true
    {
      echo "port=0"; echo "interface=br0"; echo "bind-interfaces"; echo "user=root"
      echo "dhcp-range=$LAB_NET.$VM_FIRST,$LAB_NET.254,1h"
      echo "dhcp-leasefile=$OUT/site-dhcp.leases"; echo "log-facility=$OUT/site-dhcp.log"
      echo "dhcp-ignore=tag:!vm"
      vm_macs | sed 's/.*/dhcp-host=&,set:vm/'
    } > "$OUT/site-dhcp.conf"
    start_bg "$sw" "$OUT/site-dhcp.out" dnsmasq --keep-in-foreground --conf-file="$OUT/site-dhcp.conf"
    SITE_DHCP_PID=$BG_PID
    # The sink the VMs' kernel script reports to: a request per VM in its log.
    start_bg "$sw" "$OUT/sink.log" python3 -m http.server "${SINK#*:}" --bind "${SINK%:*}" --directory "$OUT/www"
  fi
  VM_LIST=""
  VM_TAG=$tag
  SINK_FROM=$(( $(stat -c %s "$OUT/sink.log" 2>/dev/null || echo 0) + 1 )) # this run's reports only
  VM_TX0=()
  VM_T0=$SECONDS
  for v in $VMS; do
    mac=$(vm_macs | sed -n "$((i + 1))p")
    local tap="vt$i"
    ip -n "$sw" tuntap add dev "$tap" mode tap 2>/dev/null || true
    ip -n "$sw" link set "$tap" master br0 up
    VM_TX0[$i]=$(vm_tx "$i")
    local fw=() rom=""
    if [ "$v" = ovmf ]; then
      rom=",romfile=" # edk2's own PXE client, not the NIC ROM's iPXE
      cp /usr/share/OVMF/OVMF_VARS_4M.fd "$OUT/vm-$tag-$v.vars"
      fw=(-drive "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd"
          -drive "if=pflash,format=raw,file=$OUT/vm-$tag-$v.vars")
    fi
    start_bg "$sw" "$OUT/vm-$tag-$v.log" timeout 600 qemu-system-x86_64 -accel tcg -m 512 -display none \
      -serial "file:$OUT/vm-$tag-$v.serial" -monitor "unix:$OUT/vm-$tag-$v.mon,server=on,wait=off" -boot n "${fw[@]}" \
      -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" -device "virtio-net-pci,netdev=n0,mac=$mac$rom"
    VM_PIDS+=("$BG_PID")
    VM_LIST="$VM_LIST $v=$mac"
    i=$((i + 1))
  done
}

# vm_tx I: the bytes the bridge sent VM I's tap.
vm_tx() { ip netns exec "$LAB_ID-sw" cat "/sys/class/net/vt$1/statistics/tx_bytes" 2>/dev/null || echo 0; }

# vm_screendump NAME: what a VM that did not finish shows on its screen
# (iPXE prints there, not on the serial port), as OUT/vm-NAME.ppm.
vm_screendump() {
  python3 - "$OUT/vm-$1.mon" "$OUT/vm-$1.ppm" <<'PY' 2>/dev/null || true
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"screendump " + sys.argv[2].encode() + b"\n")
time.sleep(1)
PY
}

# vms_wait: wait (up to 5 minutes from the VMs' start) until each VM's
# kernel script has told the sink that it ran, which it does after both
# files were fetched, then stop the VMs; prints v=SECONDS (power-on to
# that) or v=FAIL(bytes the VM was sent) with a screendump of it.
vms_wait() {
  local out="" vm v i mac
  local -A at=()
  while [ $SECONDS -lt $((VM_T0 + 300)) ]; do
    local all=1
    for vm in $VM_LIST; do
      v=${vm%%=*}; mac=${vm#*=}
      if [ -z "${at[$v]:-}" ] && tail -c "+$SINK_FROM" "$OUT/sink.log" 2>/dev/null | grep -q "done?mac=${mac//:/-}"; then
        at[$v]=$((SECONDS - VM_T0))
      fi
      [ -n "${at[$v]:-}" ] || all=0
    done
    [ "$all" = 1 ] && break
    sleep 1
  done
  i=0
  for vm in $VM_LIST; do
    v=${vm%%=*}
    if [ -n "${at[$v]:-}" ]; then
      out="$out,$v=${at[$v]}s"
    else
      out="$out,$v=FAIL($(( $(vm_tx "$i") - ${VM_TX0[$i]} ))B)"
      vm_screendump "$VM_TAG-$v"
    fi
    i=$((i + 1))
  done
  local p
  for p in "${VM_PIDS[@]}"; do stop_bg "$p"; done
  VM_PIDS=()
  echo "${out#,}"
}

# --- the run -------------------------------------------------------------------

summary() {
  tsv_show "$OUT/results.tsv"
  echo
  echo "== medians over $ROUNDS round(s); ratio = median of per-round siteboot/anchor =="
  printf '%-6s %-7s %-6s %-9s %6s %9s %7s %7s %7s %8s %8s %7s %7s %7s %7s %7s\n' \
    N rcvbuf link target done compl_s p50_s p99_s p99/p50 dhcp_p99 tftp_p99 cpu_s rss_MiB log/m rto_cli ratio
  local key n b r t
  while IFS=$'\t' read -r n b r; do
    for t in anchor siteboot alt; do
      awk -F'\t' -v n="$n" -v b="$b" -v r="$r" -v t="$t" '$1 ~ /^[0-9]+$/ && $2 == t && $3 == n && $4 == b && $5 == r' "$OUT/results.tsv" > "$OUT/.rows"
      [ -s "$OUT/.rows" ] || continue
      local med ratio=""
      med() { cut -f"$1" "$OUT/.rows" | median_of "${2:-%.2f}"; }
      if [ "$t" != anchor ]; then
        ratio=$(awk -F'\t' -v n="$n" -v b="$b" -v r="$r" -v t="$t" '
          $3 == n && $4 == b && $5 == r && $2 == t {x[$1] = $9}
          $3 == n && $4 == b && $5 == r && $2 == "anchor" {y[$1] = $9}
          END {for (k in x) if ((k in y) && y[k] > 0) print x[k] / y[k]}' "$OUT/results.tsv" | median_of %.2f)
        ratio=${ratio:+${ratio}x}
      fi
      printf '%-6s %-7s %-6s %-9s %6s %9s %7s %7s %7s %8s %8s %7s %7s %7s %7s %7s\n' "$n" "$b" "$r" "$t" \
        "$(med 6 %d)/$n" "$(med 9)" "$(med 10)" "$(med 11)" \
        "$(awk -F'\t' '$10 > 0 {print $11 / $10}' "$OUT/.rows" | median_of %.2f)" \
        "$(med 13 %.3f)" "$(med 14 %.3f)" "$(med 15 %.1f)" "$(med 16 %d)" \
        "$(awk -F'\t' -v n="$n" '{print $18 / n}' "$OUT/.rows" | median_of %.2f)" "$(med 20 %d)" "$ratio"
    done
  done < <(awk -F'\t' 'NR > 1 && $1 ~ /^[0-9]+$/ {print $3 "\t" $4 "\t" $5}' "$OUT/results.tsv" | awk '!seen[$0]++')
}

main() {
  preflight
  trap 'touch "$OUT/sample.stop" 2>/dev/null; for p in "${VM_PIDS[@]}"; do stop_bg "$p"; done; lab_down' EXIT
  trap 'exit 130' INT TERM
  setup
  printf 'round\ttarget\tN\trcvbuf\tlink\tdone\tfailed\tfailures\tcompletion_s\tp50_s\tp99_s\tmax_s\tdhcp_p99_s\ttftp_p99_s\tserver_cpu_s\tpeak_rss_mib\tpeak_tcp_mib\tlog_lines\tdhcp_drops\tclient_rto\tclient_rcvq_drops\tserver_rto\tserver_retrans\tgoroutines_before\tgoroutines_after\tfds_before\tfds_after\tline_limit_s\tclient_cpu_s\tvms\tbytes_per_skb\tserver_loss_probes\tcopy_bodies\n' > "$OUT/results.tsv"
  echo "storm: kernel $KERNEL_MIB MiB, initrd $INITRD_MIB MiB, N $NS, rcvbuf $RCVBUFS, rounds $ROUNDS; siteboot $("$SITEBOOT_BIN" version 2>/dev/null | head -n 1)" >&2
  local round n b s t order
  for ((round = 1; round <= ROUNDS; round++)); do
    order=$TARGETS
    [ $((round % 2)) = 0 ] && order=$(echo "$TARGETS" | tr ' ' '\n' | tac | tr '\n' ' ')
    for n in $NS; do
      for b in $RCVBUFS; do
        for t in $order; do storm_run "$round" "$t" "$n" "$b"; done
      done
    done
    for s in $SHAPED; do
      for t in $order; do storm_run "$round" "$t" "${s#*:}" "${RCVBUFS%% *}" "${s%%:*}"; done
    done
  done
  if [ -n "$VMS" ]; then
    for t in $TARGETS; do JOIN_VMS=1 storm_run vms "$t" "${VM_N:-100}" "${RCVBUFS%% *}"; done
  fi
  summary | tee "$OUT/summary.txt"
}

main "$@"
