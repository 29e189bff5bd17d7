#!/usr/bin/env bash
# bench/wrk.sh: /cache range reads under many connections, siteboot against
# nginx, measured by wrk (a client this project did not write), in one run
# on the same namespaces.
#
#   sudo bench/wrk.sh [-s SIZE_MIB] [-d DURATION] [-r ROUNDS] [-c "8 64 256"]
#                     [-R "1048576 4096"] [-t THREADS] [-N] [-A ALT_BIN [-F]] [-o OUTDIR]
#
# Makes a SIZE_MIB (1024) random image; siteboot pulls it from an origin
# nginx and verifies it; an anchor nginx (sendfile on, tcp_nopush, one worker
# per CPU, keep-alive) serves the verified blob file itself. For ROUNDS (3)
# rounds, for each range length of -R and each connection count of -c,
# wrk -t THREADS (2) -c C -d DURATION (10s) --latency reads random aligned
# ranges (bench/wrk/ranges.lua) from each target in turn: nginx; siteboot's
# /cache/<sha256> (the fast path); with -N, siteboot with cache.fast_path
# false (net/http); with -A, another siteboot build (target "alt", fast
# path; with -F, net/http: an A/B of the net/http path), for an A/B of two
# builds in one run. ALT_BIN is the path of one
# executable file (a wrapper script must exec siteboot, so that its CPU is
# counted); it pulls and serves its own copy of the image, with its own
# CLI and the same config. The order of the targets rotates by one every
# round, so that over as many rounds as there are targets each runs in
# every place. Every server stays up for the whole run; CPU seconds are the
# target's utime+stime during its run. Every answer must be a 206 (wrk's
# non-2xx count is recorded and must be 0). Reports req/s, MB/s, p50/p99
# per point, each target's median per-round ratio to nginx, and with -A
# alt's median per-round ratio to siteboot.
# SITEBOOT_BIN=path skips the build. Traffic stays in the lab; the EXIT trap
# removes it. Reproduce BENCHMARKS.md: sudo bench/wrk.sh -r 3 -d 10s -N
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

SIZE_MIB=1024
DURATION=10s
ROUNDS=3
CONNS="8 64 256"
RANGES="1048576 4096"
THREADS=2
NETHTTP=0
ALT_BIN=""
ALT_FAST=true
OUT=""
ORIGIN_PORT=8081
NGINX_PORT=8082
SB_PORT=8080
NH_PORT=8083
ALT_PORT=8084

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }

[ "${1:-}" = --help ] && { usage; exit 0; }
while getopts "s:d:r:c:R:t:NA:Fo:h" opt; do
  case $opt in
    s) SIZE_MIB=$OPTARG ;;
    d) DURATION=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    c) CONNS=$OPTARG ;;
    R) RANGES=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    N) NETHTTP=1 ;;
    A) ALT_BIN=$OPTARG ;;
    F) ALT_FAST=false ;;
    o) OUT=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/sbt-wrk-bench-$(date +%Y%m%d-%H%M%S)}

preflight() {
  [ "$(id -u)" = 0 ] || { echo "wrk.sh: needs root (network namespaces)" >&2; exit 2; }
  local b c r
  for b in ip nginx curl wrk jq flock sha256sum timeout go bc; do
    command -v "$b" >/dev/null || { echo "wrk.sh: needs $b in PATH (apt install wrk)" >&2; exit 2; }
  done
  [[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "wrk.sh: -r $ROUNDS: want 1..99" >&2; exit 2; }
  [[ $THREADS =~ ^[1-9][0-9]?$ ]] || { echo "wrk.sh: -t $THREADS: want 1..99" >&2; exit 2; }
  for c in $CONNS; do
    [[ $c =~ ^[0-9]+$ ]] && [ "$c" -ge "$THREADS" ] && [ "$c" -le 1024 ] || { echo "wrk.sh: -c $c: want $THREADS..1024" >&2; exit 2; }
  done
  [[ $SIZE_MIB =~ ^[0-9]+$ ]] && [ "$SIZE_MIB" -ge 1 ] && [ "$SIZE_MIB" -le 8192 ] ||
    { echo "wrk.sh: -s $SIZE_MIB: want 1..8192 (MiB)" >&2; exit 2; }
  for r in $RANGES; do
    [[ $r =~ ^[1-9][0-9]{0,9}$ ]] && [ "$r" -le $((SIZE_MIB << 20)) ] || { echo "wrk.sh: -R $r: want 1..the image size (bytes)" >&2; exit 2; }
  done
  if [ -n "$ALT_BIN" ]; then
    [ -f "$ALT_BIN" ] && [ -x "$ALT_BIN" ] || { echo "wrk.sh: -A $ALT_BIN: not an executable file" >&2; exit 2; }
    # ip netns exec looks a bare name up in PATH: run the file named.
    ALT_BIN=$(realpath -e -- "$ALT_BIN")
  fi
  mkdir -p "$OUT"
}

record() { local IFS=$'\t'; printf '%s\n' "$*" >> "$OUT/results.tsv"; }

nginx_conf() {
  cat <<CONF
daemon off;
master_process on;
user root;
worker_processes auto;
worker_rlimit_nofile 4096;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 2048; }
http {
  sendfile on;
  tcp_nopush on;
  keepalive_requests 10000000;
  keepalive_timeout 120s;
  access_log off;
  default_type application/octet-stream;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  server { $2 }
}
CONF
}

# start_nginx NAME BODY URL [NS]: an nginx in the server namespace, ready
# when URL answers from NS; sets BG_PID.
start_nginx() {
  local d="$OUT/nginx-$1"
  mkdir -p "$d"
  nginx_conf "$d" "$2" > "$d/nginx.conf"
  start_bg "$SRV_NS" "$d/stderr.log" nginx -p "$d" -c "$d/nginx.conf"
  wait_http "$3" "${4:-$CLI_NS}"
}

# start_siteboot NAME PORT FAST_PATH [BIN]: siteboot on the one data dir;
# sets BG_PID.
start_siteboot() {
  local data="$OUT/siteboot-data-$1"
  mkdir -p "$data"
  cat > "$OUT/siteboot-$1.yaml" <<YAML
site_id: bench
node_id: bench-1
data_dir: $data
admin:
  socket: $data/siteboot.sock
http:
  listen: $SRV_IP:$2
  advertise: http://$SRV_IP:$2
dhcp:
  enabled: false
tftp:
  listen: ""
cache:
  fast_path: $3
YAML
  start_bg "$SRV_NS" "$OUT/siteboot-$1.log" "${4:-$SITEBOOT_BIN}" serve --config "$OUT/siteboot-$1.yaml"
  wait_http "http://$SRV_IP:$2/readyz"
}

# wait_http URL [NS]: until a HEAD of URL from NS (the client's) answers 200.
wait_http() {
  local i
  for i in $(seq 100); do
    in_ns "${2:-$CLI_NS}" curl -sfI -o /dev/null "$1" && return 0
    sleep 0.1
  done
  echo "wrk.sh: $1 did not answer" >&2
  return 1
}

# pull NAME [BIN]: the siteboot NAME pulls the image from the origin and
# verifies it, driven by BIN's CLI (SITEBOOT_BIN's by default).
pull() {
  local sock="$OUT/siteboot-data-$1/siteboot.sock" bin=${2:-$SITEBOOT_BIN}
  "$bin" --socket "$sock" image add --url "http://127.0.0.1:$ORIGIN_PORT/image.bin" --sha256 "$DIGEST" --format raw > /dev/null
  "$bin" --socket "$sock" --timeout 10m image pull --wait "$DIGEST" > /dev/null
}

# wrk_run ROUND TARGET PID URL RANGE CONNS: one wrk run, one results row.
wrk_run() {
  local round=$1 t=$2 pid=$3 url=$4 rlen=$5 c=$6 out c0 c1 hz rps mbs p50 p99 non2xx sockerr
  out="$OUT/wrk-r$round-$t-$rlen-$c.txt"
  hz=$(getconf CLK_TCK)
  c0=$(cpu_ticks "$pid")
  local n0; n0=$(netdev_packets)
  WRK_SIZE=$SIZE_BYTES WRK_RANGE=$rlen timeout 300 ip netns exec "$CLI_NS" \
    wrk -t "$THREADS" -c "$c" -d "$DURATION" --latency -s "$HERE/wrk/ranges.lua" "$url" > "$out"
  c1=$(cpu_ticks "$pid")
  local n1 reqs txp rxp; n1=$(netdev_packets)
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$out")
  mbs=$(echo "$rps * $rlen / 1000000" | bc -l | xargs printf '%.1f')
  p50=$(awk '$1 == "50%" {print $2}' "$out")
  p99=$(awk '$1 == "99%" {print $2}' "$out")
  non2xx=$(awk '/Non-2xx or 3xx responses:/ {print $NF}' "$out"); non2xx=${non2xx:-0}
  sockerr=$(awk '/Socket errors:/ {gsub(/,/, ""); print $4 + $6 + $8 + $10}' "$out"); sockerr=${sockerr:-0}
  local cpu; cpu=$(echo "($c1 - $c0) / $hz" | bc -l | xargs printf '%.2f')
  # Packets (skbs: a TSO segment counts once) the server sent and
  # received per response: how the kernel cut the responses, and the ACKs.
  reqs=$(awk '/requests in/ {print $1}' "$out")
  txp=$(echo "$n0 $n1 $reqs" | awk '{printf "%.1f", ($3 - $1) / $5}')
  rxp=$(echo "$n0 $n1 $reqs" | awk '{printf "%.1f", ($4 - $2) / $5}')
  printf 'r%s %-8s range %8s c %4s: %10s req/s %8s MB/s p50 %8s p99 %8s non-2xx %s socket errors %s server CPU %s s, packets out/in per response %s/%s\n' \
    "$round" "$t" "$rlen" "$c" "$rps" "$mbs" "$p50" "$p99" "$non2xx" "$sockerr" "$cpu" "$txp" "$rxp" >&2
  record "$round" "$t" "$rlen" "$c" "$rps" "$mbs" "$p50" "$p99" "$non2xx" "$sockerr" "$cpu" "$txp" "$rxp"
}

# netdev_packets: packets the server namespace's eth0 sent and received.
netdev_packets() {
  in_ns "$SRV_NS" cat /sys/class/net/eth0/statistics/tx_packets /sys/class/net/eth0/statistics/rx_packets | paste -sd' '
}

# paired_ratio RANGE CONNS TARGET BASE: the median over rounds of TARGET's
# req/s over BASE's in the same round.
paired_ratio() {
  awk -F'\t' -v r="$1" -v c="$2" -v t="$3" -v b="$4" '
    $3 == r && $4 == c && $2 == t {x[$1] = $5}
    $3 == r && $4 == c && $2 == b {y[$1] = $5}
    END {for (k in x) if ((k in y) && y[k] > 0) print x[k] / y[k]}' "$OUT/results.tsv" | median_of %.2f
}

summary() {
  tsv_show "$OUT/results.tsv"
  echo
  echo "== medians over $ROUNDS rounds; ratios are medians of per-round ratios of req/s =="
  local rlen c t
  printf '%-9s %-5s %-10s %12s %12s %8s %8s\n' range conns target req/s MB/s /nginx /siteboot
  for rlen in $RANGES; do
    for c in $CONNS; do
      for t in nginx siteboot $([ "$NETHTTP" = 1 ] && echo nethttp) $([ -n "$ALT_BIN" ] && echo alt); do
        local rps mbs ratio="" vs=""
        rps=$(awk -F'\t' -v t="$t" -v r="$rlen" -v c="$c" '$2 == t && $3 == r && $4 == c {print $5}' "$OUT/results.tsv" | median_of %.0f)
        mbs=$(awk -F'\t' -v t="$t" -v r="$rlen" -v c="$c" '$2 == t && $3 == r && $4 == c {print $6}' "$OUT/results.tsv" | median_of %.1f)
        [ "$t" = nginx ] || ratio=$(paired_ratio "$rlen" "$c" "$t" nginx)
        [ "$t" != alt ] || vs=$(paired_ratio "$rlen" "$c" alt siteboot)
        printf '%-9s %-5s %-10s %12s %12s %8s %8s\n' "$rlen" "$c" "$t" "$rps" "$mbs" "${ratio:+${ratio}x}" "${vs:+${vs}x}"
      done
    done
  done
}

main() {
  preflight
  trap lab_down EXIT
  trap 'exit 130' INT TERM
  if [ -z "${SITEBOOT_BIN:-}" ]; then
    SITEBOOT_BIN="$OUT/siteboot"
    (cd "$REPO" && go build -o "$SITEBOOT_BIN" ./cmd/siteboot)
  fi
  mkdir -p "$OUT/origin"
  SIZE_BYTES=$((SIZE_MIB << 20))
  [ "$(stat -c %s "$OUT/origin/image.bin" 2>/dev/null)" = "$SIZE_BYTES" ] ||
    head -c "$SIZE_BYTES" /dev/urandom > "$OUT/origin/image.bin"
  DIGEST=$(sha256sum < "$OUT/origin/image.bin" | cut -d' ' -f1)
  echo "image: $SIZE_BYTES bytes, sha256 $DIGEST; wrk $(wrk -v 2>&1 | head -n 1 | cut -d' ' -f2)" >&2
  echo "siteboot: $SITEBOOT_BIN ($("$SITEBOOT_BIN" version 2>&1 | head -n 1))" >&2
  [ -z "$ALT_BIN" ] || echo "alt: $ALT_BIN ($("$ALT_BIN" version 2>&1 | head -n 1))" >&2
  printf 'round\ttarget\trange\tconns\treq_per_s\tmb_per_s\tp50\tp99\tnon2xx\tsocket_errors\tserver_cpu_s\ttx_pkts_per_resp\trx_pkts_per_resp\n' > "$OUT/results.tsv"
  lab_up
  start_nginx origin "listen 127.0.0.1:$ORIGIN_PORT; root $OUT/origin;" "http://127.0.0.1:$ORIGIN_PORT/image.bin" "$SRV_NS"
  local fast nh="" alt="" ngx
  start_siteboot fast "$SB_PORT" true; fast=$BG_PID
  pull fast
  local blob="$OUT/siteboot-data-fast/cache/blobs/sha256/$DIGEST"
  [ -f "$blob" ] || { echo "wrk.sh: no verified blob at $blob" >&2; exit 1; }
  if [ "$NETHTTP" = 1 ]; then
    start_siteboot nethttp "$NH_PORT" false; nh=$BG_PID
    pull nethttp
  fi
  if [ -n "$ALT_BIN" ]; then
    start_siteboot alt "$ALT_PORT" "$ALT_FAST" "$ALT_BIN"; alt=$BG_PID
    pull alt "$ALT_BIN"
  fi
  start_nginx anchor "listen $SRV_IP:$NGINX_PORT; location /cache/ { alias $(dirname "$blob")/; }" "http://$SRV_IP:$NGINX_PORT/cache/$DIGEST"
  ngx=$BG_PID
  # Every target's blob in the page cache (nginx reads the fast one's).
  cat "$OUT"/siteboot-data-*/cache/blobs/sha256/"$DIGEST" > /dev/null
  # Targets as "name pid port", rotated by one every round.
  local -a targets=("nginx $ngx $NGINX_PORT" "siteboot $fast $SB_PORT")
  [ -z "$nh" ] || targets+=("nethttp $nh $NH_PORT")
  [ -z "$alt" ] || targets+=("alt $alt $ALT_PORT")
  local round rlen c i name pid port
  for ((round = 1; round <= ROUNDS; round++)); do
    echo "== round $round/$ROUNDS (load $(cut -d' ' -f1-3 /proc/loadavg)) ==" >&2
    for rlen in $RANGES; do
      for c in $CONNS; do
        for ((i = 0; i < ${#targets[@]}; i++)); do
          read -r name pid port <<< "${targets[(i + round - 1) % ${#targets[@]}]}"
          wrk_run "$round" "$name" "$pid" "http://$SRV_IP:$port/cache/$DIGEST" "$rlen" "$c"
        done
      done
    done
  done
  summary
}

main "$@"
