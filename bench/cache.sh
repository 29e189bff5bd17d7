#!/usr/bin/env bash
# bench/cache.sh: image-cache benchmarks, siteboot against nginx and
# curl | sha256sum, in the same run on the same namespaces (issue 3 item 8).
#
#   sudo bench/cache.sh [-s SIZE_MIB] [-d DURATION] [-c CLIENTS] [-r ROUNDS] [-R RANGE_BYTES] [-N] [-o OUTDIR]
#
# Makes a SIZE_MIB (1024) random image, serves it from an origin nginx on
# 127.0.0.1:8081 inside the server namespace, then for ROUNDS (5) rounds:
# PULL: siteboot on a fresh data dir pulls it (`image add` + `image pull
# --wait`, timed, with /proc/<pid>/io before and after), then the same
# transfer is timed as `curl -s URL | sha256sum`. RANGE: the blob siteboot
# verified is served by nginx (sendfile on, alias to the blob file itself)
# and by siteboot (/cache/<hex>), one at a time, alternating; rangeload
# (bench/rangeload) in the client namespace runs CLIENTS (64) keep-alive
# clients reading random aligned RANGE_BYTES (1048576) ranges for DURATION
# (15s), checking one answer in 16 against the file. siteboot answers them
# on its fast path (its /metrics counts fast responses and hand-offs, shown
# after each run); -N adds a third target, siteboot with cache.fast_path
# false (every request through net/http), to measure what the fast path
# buys. Server CPU (utime+stime from
# /proc/<pid>/stat, nginx master and workers summed) per GB served.
# SITEBOOT_BIN=path skips the build. Traffic stays in the lab; the EXIT trap
# removes it. Reproduce BENCHMARKS.md: sudo bench/cache.sh -r 5 -d 15s -N
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
# shellcheck source=lib.sh
source "$HERE/lib.sh"

SIZE_MIB=1024
DURATION=15s
CLIENTS=64
ROUNDS=5
RANGE_BYTES=1048576
NETHTTP=0
OUT=""
ORIGIN_PORT=8081
NGINX_PORT=8082
SB_PORT=8080

usage() { awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; }

[ "${1:-}" = --help ] && { usage; exit 0; }
while getopts "s:d:c:r:R:No:h" opt; do
  case $opt in
    s) SIZE_MIB=$OPTARG ;;
    d) DURATION=$OPTARG ;;
    c) CLIENTS=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    R) RANGE_BYTES=$OPTARG ;;
    N) NETHTTP=1 ;;
    o) OUT=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
OUT=${OUT:-/tmp/sbt-cache-bench-$(date +%Y%m%d-%H%M%S)}
ROUND=0
TARGET_PID=""

preflight() {
  [ "$(id -u)" = 0 ] || { echo "cache.sh: needs root (network namespaces)" >&2; exit 2; }
  local b
  for b in ip nginx curl jq flock sha256sum timeout go bc; do
    command -v "$b" >/dev/null || { echo "cache.sh: needs $b in PATH" >&2; exit 2; }
  done
  [[ $ROUNDS =~ ^[1-9][0-9]?$ ]] || { echo "cache.sh: -r $ROUNDS: want 1..99" >&2; exit 2; }
  [[ $RANGE_BYTES =~ ^[1-9][0-9]{0,8}$ ]] || { echo "cache.sh: -R $RANGE_BYTES: want 1..999999999 (bytes)" >&2; exit 2; }
  [[ $SIZE_MIB =~ ^[0-9]+$ ]] && [ "$SIZE_MIB" -ge 1 ] && [ "$SIZE_MIB" -le 8192 ] ||
    { echo "cache.sh: -s $SIZE_MIB: want 1..8192 (MiB)" >&2; exit 2; }
  mkdir -p "$OUT"
}

# record KIND FIELDS...: one line of results.tsv, tagged with ROUND.
record() { local IFS=$'\t'; printf '%s\t%s\n' "$ROUND" "$*" >> "$OUT/results.tsv"; }

now() { date +%s.%N; }

# io_field PID NAME: one counter of /proc/PID/io.
io_field() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/io"; }

# ----------------------------------------------------------------- servers --

start_origin() {
  local d="$OUT/nginx-origin"
  mkdir -p "$d"
  nginx_conf "$d" "listen 127.0.0.1:$ORIGIN_PORT; root $OUT/origin;" > "$d/nginx.conf"
  start_bg "$SRV_NS" "$d/stderr.log" nginx -p "$d" -c "$d/nginx.conf"
  ORIGIN_PID=$BG_PID
  wait_http "$SRV_NS" "http://127.0.0.1:$ORIGIN_PORT/image.bin"
}

# nginx_conf DIR SERVER-BODY: an nginx config, foreground, files under DIR,
# one worker per CPU, sendfile on, unlimited keep-alive requests.
nginx_conf() {
  cat <<CONF
daemon off;
master_process on;
user root;
worker_processes auto;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 1024; }
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

start_nginx_anchor() {
  local d="$OUT/nginx-anchor"
  mkdir -p "$d"
  nginx_conf "$d" "listen $SRV_IP:$NGINX_PORT; location /cache/ { alias $BLOB_DIR/; }" > "$d/nginx.conf"
  start_bg "$SRV_NS" "$d/stderr.log" nginx -p "$d" -c "$d/nginx.conf"
  TARGET_PID=$BG_PID
  wait_http "$CLI_NS" "http://$SRV_IP:$NGINX_PORT/cache/$DIGEST"
}

# write_siteboot_config [FAST_PATH]: the appliance's config (cache.fast_path
# FAST_PATH, default true).
write_siteboot_config() {
  cat > "$OUT/siteboot.yaml" <<YAML
site_id: bench
node_id: bench-1
data_dir: $SB_DATA
admin:
  socket: $SB_DATA/siteboot.sock
log:
  level: warn
http:
  listen: $SRV_IP:$SB_PORT
  advertise: http://$SRV_IP:$SB_PORT
dhcp:
  enabled: false
tftp:
  listen: ""
cache:
  fast_path: ${1:-true}
YAML
}

# start_siteboot FRESH [FAST_PATH]: the appliance on SB_DATA (emptied first
# if FRESH=1).
start_siteboot() {
  SB_DATA="$OUT/siteboot-data"
  [ "$1" = 1 ] && rm -rf "$SB_DATA"
  mkdir -p "$SB_DATA"
  write_siteboot_config "${2:-true}"
  start_bg "$SRV_NS" "$OUT/siteboot-r$ROUND.log" "$SITEBOOT_BIN" serve --config "$OUT/siteboot.yaml"
  TARGET_PID=$BG_PID
  wait_http "$CLI_NS" "http://$SRV_IP:$SB_PORT/readyz"
}

sb() { "$SITEBOOT_BIN" --socket "$SB_DATA/siteboot.sock" "$@"; }

# wait_http NS URL: until a HEAD of URL answers 200 (10 s at most).
wait_http() {
  local i
  for i in $(seq 100); do
    in_ns "$1" curl -sfI -o /dev/null "$2" && return 0
    sleep 0.1
  done
  echo "cache.sh: $2 did not answer" >&2
  return 1
}

stop_target() {
  [ -n "$TARGET_PID" ] && stop_bg "$TARGET_PID"
  TARGET_PID=""
}

# ----------------------------------------------------------------- suites --

# pull_siteboot: a fresh appliance pulls the image; time and I/O recorded.
pull_siteboot() {
  start_siteboot 1
  local pid=$TARGET_PID k t0 t1 secs
  declare -A io0 io1
  for k in rchar wchar read_bytes write_bytes; do io0[$k]=$(io_field "$pid" "$k"); done
  t0=$(now)
  sb image add --url "http://127.0.0.1:$ORIGIN_PORT/image.bin" --sha256 "$DIGEST" --format raw > /dev/null
  sb --timeout 10m image pull --wait "$DIGEST" > "$OUT/pull-r$ROUND.progress"
  t1=$(now)
  for k in rchar wchar read_bytes write_bytes; do io1[$k]=$(io_field "$pid" "$k"); done
  secs=$(echo "$t1 - $t0" | bc -l)
  printf 'r%s siteboot pull: %.3f s, %.0f MB/s; io: rchar %d wchar %d read_bytes %d write_bytes %d\n' "$ROUND" \
    "$secs" "$(echo "$SIZE_BYTES / $secs / 1000000" | bc -l)" $((io1[rchar] - io0[rchar])) $((io1[wchar] - io0[wchar])) \
    $((io1[read_bytes] - io0[read_bytes])) $((io1[write_bytes] - io0[write_bytes])) >&2
  record pull siteboot "$(printf '%.3f' "$secs")" $((io1[rchar] - io0[rchar])) $((io1[wchar] - io0[wchar])) \
    $((io1[read_bytes] - io0[read_bytes])) $((io1[write_bytes] - io0[write_bytes]))
  [ -f "$BLOB_DIR/$DIGEST" ] || { echo "cache.sh: no blob at $BLOB_DIR/$DIGEST after the pull" >&2; return 1; }
  stop_target
}

# pull_curl: the same transfer through curl | sha256sum, digest checked.
pull_curl() {
  local t0 t1 got secs
  t0=$(now)
  got=$(in_ns "$SRV_NS" bash -c "curl -sf http://127.0.0.1:$ORIGIN_PORT/image.bin | sha256sum" | cut -d' ' -f1)
  t1=$(now)
  [ "$got" = "$DIGEST" ] || { echo "cache.sh: curl | sha256sum gave $got, want $DIGEST" >&2; return 1; }
  secs=$(echo "$t1 - $t0" | bc -l)
  printf 'r%s curl | sha256sum: %.3f s, %.0f MB/s\n' "$ROUND" "$secs" "$(echo "$SIZE_BYTES / $secs / 1000000" | bc -l)" >&2
  record pull curl "$(printf '%.3f' "$secs")"
}

# range_run TARGET URL: rangeload against URL with CPU of TARGET_PID.
range_run() {
  local t=$1 url=$2 json="$OUT/range-r$ROUND-$1.json" c0 c1 hz
  hz=$(getconf CLK_TCK)
  c0=$(cpu_ticks "$TARGET_PID")
  timeout 900 ip netns exec "$CLI_NS" "$RANGELOAD" -url "$url" -clients "$CLIENTS" -duration "$DURATION" -range "$RANGE_BYTES" \
    -verify "$BLOB_DIR/$DIGEST" -verify-every 16 -label "r$ROUND $t" -json > "$json"
  c1=$(cpu_ticks "$TARGET_PID")
  local cpu gb
  cpu=$(echo "($c1 - $c0) / $hz" | bc -l)
  gb=$(jq '.bytes / 1e9' "$json")
  jq -r --arg cpu "$cpu" '"\(.label): \(.mb_per_s|floor) MB/s, \(.req_per_s|floor) req/s, p50 \(.latency.p50_ms) ms, p99 \(.latency.p99_ms) ms, \(.errors) errors, \(.verified) verified, server CPU \($cpu|tonumber*100|floor/100) s, client CPU \(.client_cpu_s*100|floor/100) s"' "$json" >&2
  record range "$t" "$(jq -r '[(.mb_per_s|floor), (.req_per_s|floor), (.latency.p50_ms*1000|floor/1000), (.latency.p99_ms*1000|floor/1000), .errors, .verified] | @tsv' "$json")" \
    "$(printf '%.2f' "$cpu")" "$(echo "$cpu / $gb" | bc -l | xargs printf '%.3f')" "$(jq '.client_cpu_s*100|floor/100' "$json")" \
    "$(jq --arg cpu "$cpu" '(($cpu|tonumber) + .client_cpu_s) / (.bytes / 1e9) * 1000 | floor / 1000' "$json")"
}

range_nginx() {
  start_nginx_anchor
  range_run nginx "http://$SRV_IP:$NGINX_PORT/cache/$DIGEST"
  stop_target
}

# range_siteboot TARGET FAST_PATH: siteboot with cache.fast_path FAST_PATH.
range_siteboot() {
  start_siteboot 0 "$2"
  wait_http "$CLI_NS" "http://$SRV_IP:$SB_PORT/cache/$DIGEST"
  range_run "$1" "http://$SRV_IP:$SB_PORT/cache/$DIGEST"
  in_ns "$CLI_NS" curl -sf "http://$SRV_IP:$SB_PORT/metrics" |
    awk -v t="$1" '/^siteboot_cache_fast_path_(responses|handoffs)_total / {sub(/^siteboot_cache_fast_path_/, ""); m = m " " $0}
      END {print "r'"$ROUND"' " t " fast path:" m}' >&2
  stop_target
}

# median KIND TARGET COLUMN and paired KIND NUM DEN COLUMN over results.tsv
# (1 round, 2 kind, 3 target, 4.. fields); see tsv_median and tsv_paired.
median() { tsv_median "$OUT/results.tsv" "$1" "$2" "$3"; }
paired() { tsv_paired "$OUT/results.tsv" 2 "$1" 3 "$2" "$3" "$4"; }

summary() {
  tsv_show "$OUT/results.tsv"
  echo
  echo "== medians over $ROUNDS rounds =="
  local ps pc
  ps=$(median pull siteboot 4); pc=$(median pull curl 4)
  awk -v s="$ps" -v c="$pc" -v b="$SIZE_BYTES" 'BEGIN {
    printf "pull: siteboot %.3f s (%.0f MB/s), curl|sha256sum %.3f s (%.0f MB/s): %.2fx (target >= 0.9x)\n", s, b/s/1e6, c, b/c/1e6, c/s }'
  printf 'pull I/O of siteboot (median): rchar %s wchar %s read_bytes %s write_bytes %s, image %s bytes\n' \
    "$(median pull siteboot 5)" "$(median pull siteboot 6)" "$(median pull siteboot 7)" "$(median pull siteboot 8)" "$SIZE_BYTES"
  local t targets="nginx siteboot"
  if [ "$NETHTTP" = 1 ]; then targets="$targets nethttp"; fi
  echo "ranges of $RANGE_BYTES bytes, $CLIENTS clients, $DURATION per run"
  for t in $targets; do
    printf 'range %-8s %s MB/s, %s req/s, p50 %s ms, p99 %s ms, server %s CPU-s per GB, client CPU %s s\n' "$t" "$(median range "$t" 4)" \
      "$(median range "$t" 5)" "$(median range "$t" 6)" "$(median range "$t" 7)" "$(median range "$t" 11)" "$(median range "$t" 12)"
  done
  awk -v s="$(median range siteboot 4)" -v n="$(median range nginx 4)" -v cs="$(median range siteboot 11)" -v cn="$(median range nginx 11)" \
    'BEGIN { printf "range throughput siteboot/nginx, ratio of medians: %.2fx (target >= 0.9x); CPU per GB: %.2fx\n", s/n, cs/cn }'
  printf 'range siteboot/nginx, median of per-round ratios: throughput %sx (target >= 0.9x), server CPU per GB %sx, server+client CPU per GB %sx\n' \
    "$(paired range siteboot nginx 4)" "$(paired range siteboot nginx 11)" "$(paired range siteboot nginx 13)"
  if [ "$NETHTTP" = 1 ]; then
    printf 'range siteboot (fast path)/nethttp (fast_path false), median of per-round ratios: throughput %sx, server CPU per GB %sx\n' \
      "$(paired range siteboot nethttp 4)" "$(paired range siteboot nethttp 11)"
  fi
  printf 'pull curl/siteboot time, median of per-round ratios: %sx (target >= 0.9x)\n' "$(paired pull curl siteboot 4)"
}

main() {
  preflight
  trap lab_down EXIT
  trap 'exit 130' INT TERM
  RANGELOAD="$OUT/rangeload"
  (cd "$REPO" && go build -o "$RANGELOAD" ./bench/rangeload)
  if [ -z "${SITEBOOT_BIN:-}" ]; then
    SITEBOOT_BIN="$OUT/siteboot"
    (cd "$REPO" && go build -o "$SITEBOOT_BIN" ./cmd/siteboot)
  fi
  mkdir -p "$OUT/origin"
  SIZE_BYTES=$((SIZE_MIB << 20))
  [ "$(stat -c %s "$OUT/origin/image.bin" 2>/dev/null)" = "$SIZE_BYTES" ] ||
    head -c "$SIZE_BYTES" /dev/urandom > "$OUT/origin/image.bin"
  DIGEST=$(sha256sum < "$OUT/origin/image.bin" | cut -d' ' -f1)
  BLOB_DIR="$OUT/siteboot-data/cache/blobs/sha256"
  echo "image: $SIZE_BYTES bytes, sha256 $DIGEST" >&2
  printf 'round\tkind\ttarget\tsecs|mb_per_s\trchar|req_per_s\twchar|p50_ms\tread_bytes|p99_ms\twrite_bytes|errors\tverified\tcpu_s\tcpu_s_per_gb\tclient_cpu_s\ttotal_cpu_s_per_gb\n' > "$OUT/results.tsv"
  lab_up
  start_origin
  in_ns "$SRV_NS" curl -sf -o /dev/null "http://127.0.0.1:$ORIGIN_PORT/image.bin" # page cache warm for both
  for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    echo "== pull round $ROUND/$ROUNDS (load $(cut -d' ' -f1-3 /proc/loadavg)) ==" >&2
    pull_siteboot
    pull_curl
  done
  stop_bg "$ORIGIN_PID"
  for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
    echo "== range round $ROUND/$ROUNDS (load $(cut -d' ' -f1-3 /proc/loadavg)) ==" >&2
    range_nginx
    range_siteboot siteboot true
    if [ "$NETHTTP" = 1 ]; then range_siteboot nethttp false; fi
  done
  summary
}

main "$@"
