#!/usr/bin/env bash
# The example service on SQLite, as an operator would check it: it starts, becomes ready
# (GET /ready is 200 on the leader), exports lease's metrics with HELP and TYPE lines and
# its fenced writes, and on SIGTERM releases its lease and exits 0. Bounded: about 3 s once
# built, 60 s at most. Exits non-zero, with the service's log, on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# .ci/run passes the binary `cargo test --workspace` built (for the example's own tests), so
# this step compiles nothing; alone, the script builds it.
bin=${LEASE_SERVICE_BIN:-}
if [[ -z $bin ]]; then
    cargo build -q -p lease-example-service
    bin=${CARGO_TARGET_DIR:-target}/debug/lease-example-service
fi
[[ -x $bin ]] || { echo "service-smoke: no binary at $bin" >&2; exit 1; }
dir=$(mktemp -d)
log=$dir/service.log
out=$dir/stdout
pid=
cleanup() {
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -rf "$dir"
}
trap cleanup EXIT
fail() {
    echo "service-smoke: $*" >&2
    echo "---- the service's log:" >&2
    cat "$log" >&2 || true
    exit 1
}

start=$(date +%s.%N)
"$bin" --store "sqlite://$dir/leases.db" --listen 127.0.0.1:0 --instance smoke --lease 3 \
    --every-ms 100 --linger-ms 1500 >"$out" 2>"$log" &
pid=$!

addr=
for _ in $(seq 1 200); do
    addr=$(sed -n 's#^listening on http://##p' "$out" | head -n 1)
    [[ -n $addr ]] && break
    kill -0 "$pid" 2>/dev/null || fail "exited before it listened"
    sleep 0.1
done
[[ -n $addr ]] || fail "did not listen within 20 s"

# A follower answers 503; the only instance becomes the leader at its first campaign.
ready=
for _ in $(seq 1 100); do
    code=$(curl -s -o "$dir/ready" -w '%{http_code}' "http://$addr/ready" || true)
    if [[ $code == 200 ]]; then ready=yes; break; fi
    sleep 0.1
done
[[ -n $ready ]] || fail "GET /ready never answered 200 (last: ${code:-none})"
grep -q '"leader":true' "$dir/ready" || fail "/ready's body does not say leader: $(cat "$dir/ready")"
grep -q '"holder":"smoke"' "$dir/ready" || fail "/ready's body does not name the holder: $(cat "$dir/ready")"

# Let a few renewals and fenced writes happen, then read the metrics.
sleep 1
curl -sf "http://$addr/metrics" >"$dir/metrics" || fail "GET /metrics failed"
for want in \
    '^# HELP lease_held ' \
    '^# TYPE lease_held gauge' \
    '^lease_held{name="report"} 1$' \
    '^lease_term{name="report"} 1$' \
    '^lease_claims_total{name="report"} 1$' \
    '^lease_campaigns_total{name="report",outcome="claimed"} 1$' \
    '^# TYPE lease_renew_seconds histogram' \
    '^lease_renew_seconds_bucket{name="report",le="0.1"} ' \
    '^lease_renew_time_left_seconds_count{name="report"} ' \
    '^# HELP service_reports_written_total ' \
    '^service_reports_written_total [1-9]'; do
    grep -q -- "$want" "$dir/metrics" || fail "/metrics has no line matching: $want"
done

# SIGTERM: readiness turns 503 and, once the release is answered, lease_held 0 (the service
# keeps answering HTTP 1.5 s after its close for this).
kill -TERM "$pid"
released=
for _ in $(seq 1 14); do
    if curl -sf "http://$addr/metrics" 2>/dev/null | grep -q '^lease_held{name="report"} 0$'; then
        released=yes
        break
    fi
    sleep 0.1
done
[[ -n $released ]] || fail "lease_held did not turn 0 after SIGTERM"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://$addr/ready" || true)
[[ $code == 503 || $code == 000 ]] || fail "GET /ready answered $code after SIGTERM"
status=0
for _ in $(seq 1 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$pid" 2>/dev/null; then fail "still running 10 s after SIGTERM"; fi
wait "$pid" || status=$?
pid=
[[ $status == 0 ]] || fail "exited with $status after SIGTERM"
grep -q 'lease released' "$log" || fail "no 'lease released' line after SIGTERM"
grep -q 'shut down cleanly' "$log" || fail "no 'shut down cleanly' line"
if grep -q 'campaigning again' "$log"; then fail "a closing elector said it campaigns again"; fi
end=$(date +%s.%N)
awk -v s="$start" -v e="$end" \
    'BEGIN { printf "service-smoke: ready, metrics and a clean SIGTERM exit in %.1f s\n", e - s }'
