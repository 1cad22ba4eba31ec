#!/usr/bin/env bash
# Every server backend's conformance suite through containers: lease-conformance's `docker`
# feature (testcontainers) against the images ci/docker.sh builds from Debian's packages, on the
# project's own dockerd (README, "The tests with Docker"). .ci/run runs it after the test step
# against the machine's servers; it runs the same by hand.
#
#   bash ci/containers.sh [CARGO TEST ARGS...]
#
# No LEASE_TEST_*_URL is set for this run, so each test process starts its backend's container
# (the log says `starting …`, `… ready at …`, and `removed container …` once the process has
# exited), and every backend is required (LEASE_TEST_REQUIRE), so none can skip. Only the
# conformance test binaries are built with the feature. Every container carries the label
# org.lease.conformance.run=<this run> (LEASE_TEST_CONTAINER_RUN): any left once the test
# processes have exited fails the run (they are removed, and listed).
set -euo pipefail
cd "$(dirname "$0")/.."

BACKENDS=postgres,mysql,redis,nats,mongodb,etcd,memcached
began=$SECONDS
docker_env=$(bash ci/docker.sh)
run=ci-$(date -u +%Y%m%dT%H%M%S)-$$
docker_host=$(sed -n 's/^DOCKER_HOST=//p' <<<"$docker_env")

# The engine's own record of this run's containers (created, started, destroyed), for the
# summary below: a label that no container carried would make the check for leftovers pass
# without looking at anything.
events=$(mktemp)
docker -H "$docker_host" events --filter "label=org.lease.conformance.run=$run" --filter type=container \
  --format '{{.Action}} {{index .Actor.Attributes "image"}} {{.Actor.ID}}' >"$events" &
events_pid=$!

status=0
(
  while IFS= read -r var; do unset "$var"; done < <(env | sed -n 's/^\(LEASE_TEST_[A-Z_]*_URL\)=.*/\1/p')
  while IFS= read -r line; do export "${line?}"; done <<<"$docker_env"
  for backend in ${BACKENDS//,/ }; do
    var=LEASE_TEST_${backend^^}_IMAGE
    if [ -z "${!var:-}" ]; then
      echo "containers.sh: no image for $backend: ci/docker.sh did not build it (its lines above say why)" >&2
      exit 1
    fi
    echo "containers.sh: $backend from ${!var}"
  done
  export LEASE_TEST_REQUIRE=$BACKENDS LEASE_TEST_CONTAINER_RUN=$run
  # lease (the facade: memory and SQLite) and lease-local need no server: the test step ran
  # their conformance suites already.
  cargo test --workspace --exclude lease --exclude lease-local \
    --features lease-redis/sentinel,lease-conformance/docker --test conformance "$@"
) || status=$?

# Each test process's watcher removes its containers once the process has exited: give the last
# one a moment, then none of this run's may be left.
filter=label=org.lease.conformance.run=$run
left=""
for _ in $(seq 1 40); do
  left=$(docker -H "$docker_host" ps -aq --filter "$filter")
  [ -z "$left" ] && break
  sleep 0.5
done
if [ -n "$left" ]; then
  echo "containers.sh: containers of this run left behind ($filter):" >&2
  docker -H "$docker_host" ps -a --filter "$filter" >&2
  for id in $left; do docker -H "$docker_host" rm -f -v "$id" >/dev/null || true; done
  if [ "$status" -eq 0 ]; then status=1; fi
else
  echo "containers.sh: no container of this run left ($filter)"
fi
sleep 0.5
kill "$events_pid" 2>/dev/null || true
wait "$events_pid" 2>/dev/null || true

# Each container of the run: its image, and whether the engine saw it start and be removed.
# Every backend's image must have started, and every container that started been removed.
echo "containers.sh: the containers of this run, as the engine saw them:"
started_images=""
while read -r id; do
  image=$(awk -v id="$id" '$3 == id { print $2; exit }' "$events")
  started=no removed=no
  grep -q "^start .* $id$" "$events" && started=yes && started_images+=" $image"
  grep -q "^destroy .* $id$" "$events" && removed=yes
  echo "  ${id:0:12} $image: started $started, removed $removed"
  if [ "$started" = yes ] && [ "$removed" = no ]; then
    if [ "$status" -eq 0 ]; then status=1; fi
  fi
done < <(awk '{ print $3 }' "$events" | awk '!seen[$0]++')
rm -f "$events"
while IFS= read -r line; do
  var=${line%%=*} image=${line#*=}
  case $var in LEASE_TEST_*_IMAGE) ;; *) continue ;; esac
  if [[ " $started_images " != *" $image "* ]]; then
    echo "containers.sh: no container of $image ($var) was started in this run" >&2
    if [ "$status" -eq 0 ]; then status=1; fi
  fi
done <<<"$docker_env"
echo "containers.sh: $((SECONDS - began)) s (status $status)"
exit "$status"
