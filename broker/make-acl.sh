#!/usr/bin/env bash
# Print the broker ACL: broker/acl, then one `user` stanza per MPTCP proxy granting exactly what
# the proxy role needs for the CPEs it serves, then one per CPE granting its own state and
# telemetry topics under its own shard only.
#
# usage: make-acl.sh [--shards N] [--cpes CPE_ID[,CPE_ID...]]... [PROXY_ID:CPE_ID,CPE_ID,... ...]
#          > /etc/mosquitto/acl
#
#   --shards N     the fleet's shard count (the xApp's sharding.shards, the agents' mqtt.shards):
#                  1..4096, default 64.
#   --cpes IDS     comma-separated CPE ids (repeatable); a CPE a proxy serves need not be
#                  repeated here. A CPE not named anywhere gets no sharded topic: its agent's
#                  state and telemetry are refused.
#   PROXY_ID:CPES  a proxy (its certificate CN) and the comma-separated CPE ids it serves;
#                  `proxy-0001:` (no CPE) grants only the proxy's own state topic.
#   no argument    prints broker/acl unchanged (no proxy, no CPE).
#
# A CPE's shard is FNV-1a (32 bit) of its id modulo N, the function of xapp/core/shards.py and
# kernel-agent/mqttclient (tests/xapp/adapters/mqtt/test_broker_config.py checks all three
# agree). The broker cannot compute it, so each CPE gets a `user` stanza naming its shard: with a
# `+` there a CPE could publish retained messages under any number of invented shards, and
# the broker would keep them all.
#
# Ids must match ^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$ (the pattern of the MQTT schemas), so no
# id can carry an MQTT wildcard, a level separator or whitespace into the ACL. Refused, with
# exit status 2 and nothing printed: a malformed argument, a proxy named twice, a CPE named
# twice for one proxy, the id `mcw-xapp` (the xApp's), and a proxy id that is also a CPE id given.
# Proxies are printed sorted by id (byte order), CPEs of a proxy in the order given, then every
# CPE once, sorted by id, so the output is the one the Helm chart renders from broker.proxies,
# broker.cpes and sharding.shards (tests/packaging/test_chart.py checks it).
#
# Grants are `user` stanzas, not patterns: a pattern applies to every certificate, so any CPE
# could then act as a proxy. See README.md, "Proxies".
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
base=$here/acl
id_re='^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$'

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; }
die() { echo "make-acl.sh: $*" >&2; exit 2; }

if [[ $# -ge 1 && ( "$1" == "-h" || "$1" == "--help" ) ]]; then
  usage
  exit 0
fi
[[ -r "$base" ]] || { echo "make-acl.sh: cannot read $base" >&2; exit 1; }

declare -A served=()   # proxy id -> space-separated CPE ids, in the order given
declare -A all_cpes=()
shards=64
args=()
while (( $# > 0 )); do
  case "$1" in
    --shards)
      (( $# >= 2 )) || die "--shards: missing N"
      [[ "$2" =~ ^[1-9][0-9]{0,3}$ ]] && (( $2 <= 4096 )) || die "--shards '$2': want 1..4096"
      shards=$2
      shift 2
      ;;
    --cpes)
      (( $# >= 2 )) || die "--cpes: missing CPE ids"
      [[ -n "$2" && "$2" != *, && "$2" != ,* && "$2" != *,,* ]] || die "--cpes '$2': empty CPE id"
      readarray -d , -t cpes < <(printf '%s' "$2")
      for cpe in "${cpes[@]}"; do
        [[ "$cpe" =~ $id_re ]] || die "--cpes: CPE id '$cpe' does not match $id_re"
        [[ "$cpe" != "mcw-xapp" ]] || die "--cpes: mcw-xapp is the xApp's identity, not a CPE id"
        all_cpes[$cpe]=1
      done
      shift 2
      ;;
    --*) die "'$1': unknown option" ;;
    *) args+=("$1"); shift ;;
  esac
done
for arg in "${args[@]}"; do
  [[ "$arg" == *:* ]] || die "'$arg': expected PROXY_ID:CPE_ID[,CPE_ID...]"
  proxy=${arg%%:*}
  list=${arg#*:}
  [[ "$proxy" =~ $id_re ]] || die "'$arg': proxy id '$proxy' does not match $id_re"
  [[ "$proxy" != "mcw-xapp" ]] || die "'$arg': mcw-xapp is the xApp's identity, not a proxy id"
  [[ -z "${served[$proxy]+x}" ]] || die "proxy '$proxy' is given twice"
  cpes=()
  if [[ -n "$list" ]]; then
    # readarray, not read: read stops at a newline and would silently drop the rest.
    readarray -d , -t cpes < <(printf '%s' "$list")
    [[ "$list" != *, ]] || die "'$arg': empty CPE id"
  fi
  declare -A seen=()
  for cpe in "${cpes[@]}"; do
    [[ "$cpe" =~ $id_re ]] || die "'$arg': CPE id '$cpe' does not match $id_re"
    [[ "$cpe" != "mcw-xapp" ]] || die "'$arg': mcw-xapp is the xApp's identity, not a CPE id"
    [[ -z "${seen[$cpe]+x}" ]] || die "'$arg': CPE '$cpe' is given twice"
    seen[$cpe]=1
    all_cpes[$cpe]=1
  done
  unset seen
  served[$proxy]="${cpes[*]}"
done
for proxy in "${!served[@]}"; do
  [[ -z "${all_cpes[$proxy]+x}" ]] || die "'$proxy' is given both as a proxy and as a CPE id"
done

# FNV-1a (32 bit) of the id's bytes modulo the shard count, into $shard. Ids are ASCII (id_re),
# so a character is a byte.
shard_of() {
  local id=$1 h=2166136261 i c
  for (( i = 0; i < ${#id}; i++ )); do
    printf -v c '%d' "'${id:i:1}"
    h=$(( ((h ^ c) * 16777619) & 0xFFFFFFFF ))
  done
  shard=$(( h % shards ))
}

cat "$base"
if (( ${#served[@]} > 0 )); then
printf '\n# --- proxies (generated by broker/make-acl.sh or the chart'"'"'s broker.proxies) ---\n'
while read -r proxy; do
  printf '\nuser %s\n' "$proxy"
  # The CPE patterns name %%u for every certificate: without these denies a proxy could
  # report as a CPE called after itself (mcw/v1/s/N/cpe/PROXY_ID/state). Mosquitto checks a
  # user's deny lines before the patterns.
  printf 'topic deny mcw/v1/cpe/%s/#\n' "$proxy"
  printf 'topic deny mcw/v1/s/+/cpe/%s/#\n' "$proxy"
  printf 'topic write mcw/v1/proxy/%s/state\n' "$proxy"
  # Under the served CPE's shard only, as the CPE's own grants; the last three lines per CPE
  # are the deprecated unsharded topics of earlier releases.
  for cpe in ${served[$proxy]}; do
    shard_of "$cpe"
    printf 'topic read mcw/v1/cpe/%s/weights\n' "$cpe"
    printf 'topic read mcw/v1/s/%d/cpe/%s/state\n' "$shard" "$cpe"
    printf 'topic write mcw/v1/s/%d/proxy/%s/cpe/%s/state\n' "$shard" "$proxy" "$cpe"
    printf 'topic write mcw/v1/s/%d/proxy/%s/cpe/%s/telemetry\n' "$shard" "$proxy" "$cpe"
    printf 'topic read mcw/v1/cpe/%s/state\n' "$cpe"
    printf 'topic write mcw/v1/proxy/%s/cpe/%s/state\n' "$proxy" "$cpe"
    printf 'topic write mcw/v1/proxy/%s/cpe/%s/telemetry\n' "$proxy" "$cpe"
  done
done < <(printf '%s\n' "${!served[@]}" | LC_ALL=C sort)
fi
(( ${#all_cpes[@]} > 0 )) || exit 0
printf '\n# --- CPEs, each under its own shard of %d (generated by broker/make-acl.sh or the chart'"'"'s broker.cpes) ---\n' "$shards"
while read -r cpe; do
  shard_of "$cpe"
  printf '\nuser %s\n' "$cpe"
  printf 'topic write mcw/v1/s/%d/cpe/%s/state\n' "$shard" "$cpe"
  printf 'topic write mcw/v1/s/%d/cpe/%s/telemetry\n' "$shard" "$cpe"
done < <(printf '%s\n' "${!all_cpes[@]}" | LC_ALL=C sort)
