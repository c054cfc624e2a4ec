#!/bin/sh
# fuzz.sh runs every fuzz target of the agent for a bounded number of
# executions (CI: 50,000 each, 84 s on 2 cores with a cold build cache),
# beyond the seed corpora that plain `go test` runs. A failure leaves the
# crasher in the package's testdata/fuzz/<target>/, to be committed as a
# regression case once fixed.
#
# Usage: ./fuzz.sh [executions per target]   (default 50000; FUZZ_EXECS too)
set -eu
cd "$(dirname "$0")"
n=${1:-${FUZZ_EXECS:-50000}}
targets="
payload FuzzParseWeights
payload FuzzParseTelemetry
payload FuzzParseState
payload FuzzParseProxyState
state FuzzDecode
telemetry FuzzParseMessage
mptcppm FuzzDecodeEndpoints
mptcppm FuzzDecodeLimits
mptcppm FuzzDecodeEvent
mptcppm FuzzParseDiag
backend/wrrsysctl FuzzParse
config FuzzParse
"
# Every Fuzz function must be listed above: a new decoder's target must not
# be skipped silently.
found=$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/^func //' | sort | tr '\n' ' ')
listed=$(printf '%s\n' "$targets" | awk 'NF==2 {print $2}' | sort | tr '\n' ' ')
if [ "$found" != "$listed" ]; then
	echo "fuzz.sh: targets in the code ($found) differ from the list ($listed)" >&2
	exit 1
fi
start=$(date +%s)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%s\n' "$targets" | while read -r pkg fn; do
	[ -n "$pkg" ] || continue
	t0=$(date +%s)
	if ! go test -run '^$' -fuzz "^${fn}\$" -fuzztime "${n}x" "./$pkg" >"$log" 2>&1; then
		cat "$log" >&2
		echo "fuzz.sh: $pkg $fn FAILED" >&2
		exit 1
	fi
	execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -1 | awk '{print $2}')
	printf '%-20s %-22s %8s execs %4ss\n' "$pkg" "$fn" "${execs:-?}" "$(($(date +%s) - t0))"
done
echo "fuzz.sh: all targets, $n executions each, $(($(date +%s) - start))s"
