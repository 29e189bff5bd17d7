# bench/lib.sh: the benchmark LAN, built the way internal/netlab builds it.
# Source it; it defines lab_up, lab_down, in_ns, start_bg, stop_bg, cpu_ticks.
#
# Names: "sbt-" + 6 hex digits, a lock /run/sbt-netlab/<id>.lock held (flock
# on fd 9) while the lab lives, so netlab.CleanupStale and parallel runs
# leave it alone and remove it if this script dies without its trap.
# Topology: namespace <id>-sw holds bridge br0 (stp_state 0, forward_delay 0);
# hosts <id>-srv (.2, the server under test) and <id>-cli (.3, the load
# generator) each have eth0 on a veth into it and a 255.255.255.255/32 route.

LAB_LOCKDIR=/run/sbt-netlab
LAB_ID=""
LAB_NET=""        # e.g. 10.99.42
LAB_BG_PIDS=()

# lab_up: create the lab; sets LAB_ID, LAB_NET, SRV_NS, CLI_NS, SRV_IP, CLI_IP.
lab_up() {
  mkdir -p "$LAB_LOCKDIR"
  local tries=0
  while :; do
    LAB_ID="sbt-$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"
    if (set -C; : > "$LAB_LOCKDIR/$LAB_ID.lock") 2>/dev/null; then break; fi
    tries=$((tries + 1)); [ "$tries" -lt 10 ] || { echo "lab_up: no free id" >&2; return 1; }
  done
  exec 9<>"$LAB_LOCKDIR/$LAB_ID.lock"
  flock -n 9 || { echo "lab_up: cannot lock $LAB_ID" >&2; return 1; }
  LAB_NET="10.99.$(( $(od -An -N1 -tu1 /dev/urandom) % 254 + 1 ))"
  local sw="$LAB_ID-sw"
  ip netns add "$sw"
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge stp_state 0 forward_delay 0
  ip -n "$sw" link set br0 up
  SRV_NS="$LAB_ID-srv"; SRV_IP="$LAB_NET.2"; lab_host "$SRV_NS" 1 "$SRV_IP"
  CLI_NS="$LAB_ID-cli"; CLI_IP="$LAB_NET.3"; lab_host "$CLI_NS" 2 "$CLI_IP"
  echo "lab $LAB_ID: $LAB_NET.0/24, server $SRV_IP in $SRV_NS, client $CLI_IP in $CLI_NS" >&2
}

# lab_host NS INDEX ADDR: a host namespace with eth0 on the bridge.
lab_host() {
  local ns=$1 idx=$2 addr=$3 sw="$LAB_ID-sw"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$sw" link add "h$idx" type veth peer name eth0 netns "$ns"
  ip -n "$sw" link set "h$idx" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add 255.255.255.255/32 dev eth0
}

# in_ns NS CMD...: run a command in a lab namespace.
in_ns() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

# start_bg NS LOG CMD...: start a command in NS in the background, output to
# LOG; its pid goes to LAB_BG_PIDS and BG_PID.
start_bg() {
  local ns=$1 log=$2; shift 2
  ip netns exec "$ns" "$@" >"$log" 2>&1 &
  BG_PID=$!
  LAB_BG_PIDS+=("$BG_PID")
}

# stop_bg PID: SIGTERM, then SIGKILL after 5 s.
stop_bg() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# lab_down: stop what we started, kill what is left in the namespaces,
# delete them and drop the lock. Safe to call twice.
lab_down() {
  local pid ns
  for pid in "${LAB_BG_PIDS[@]}"; do stop_bg "$pid"; done
  LAB_BG_PIDS=()
  [ -n "$LAB_ID" ] || return 0
  for ns in "$LAB_ID-cli" "$LAB_ID-srv" "$LAB_ID-sw"; do
    [ -e "/run/netns/$ns" ] || continue
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || echo "lab_down: could not delete $ns" >&2
  done
  rm -f "$LAB_LOCKDIR/$LAB_ID.lock"
  exec 9>&-
  echo "lab $LAB_ID removed" >&2
  LAB_ID=""
}

# cpu_ticks PID: utime+stime in clock ticks of PID and, for nginx, of the
# workers it forked (live children are not in the parent's counters).
cpu_ticks() {
  local pid=$1 kids
  kids=$(cat /proc/"$pid"/task/*/children 2>/dev/null || true)
  # shellcheck disable=SC2086
  for p in $pid $kids; do cat "/proc/$p/stat"; done | awk '{sub(/^.*\) /, ""); t += $12 + $13} END {print t}'
}

# wait_for_file FILE TEXT SECONDS: wait until FILE contains TEXT.
wait_for_file() {
  local file=$1 text=$2 secs=$3 i
  for i in $(seq $((secs * 10))); do
    grep -q -- "$text" "$file" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "timed out waiting for '$text' in $file" >&2
  return 1
}

# median_of [FORMAT]: the median of the numbers on stdin, one per line
# (nothing when there are none); printed with printf FORMAT (default %s).
median_of() {
  sort -g | awk -v f="${1:-%s}" '{v[NR] = $1} END {if (NR == 0) exit; printf f "\n", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'
}

# tsv_median FILE V2 V3 COL: the median of column COL over the rows of a
# results TSV whose columns 2 and 3 are V2 and V3 (one row per round).
tsv_median() {
  awk -F'\t' -v a="$2" -v b="$3" -v c="$4" '$2 == a && $3 == b {print $c}' "$1" | median_of
}

# tsv_paired FILE KEYCOL KEY WHOCOL NUM DEN COL: among rows whose column
# KEYCOL is KEY, the median over rounds (column 1) of NUM's COL divided by
# DEN's in the same round, NUM and DEN told apart by column WHOCOL; per-round
# ratios cancel slow drifts of the background load.
tsv_paired() {
  awk -F'\t' -v kc="$2" -v k="$3" -v wc="$4" -v a="$5" -v b="$6" -v c="$7" '
    $c != "" && $kc == k && $wc == a {x[$1] = $c}
    $c != "" && $kc == k && $wc == b {y[$1] = $c}
    END {for (r in x) if ((r in y) && y[r] != 0) print x[r] / y[r]}' "$1" | median_of %.2f | tr -d '\n'
}

# tsv_show FILE: the results TSV as aligned columns.
tsv_show() {
  echo
  echo "== results ($1) =="
  column -t -s $'\t' "$1" 2>/dev/null || cat "$1"
}
