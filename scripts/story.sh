#!/usr/bin/env bash
# The split-brain story on the command line: installs what is missing, builds
# tenure, starts a private etcd
# on loopback (temp data dir, removed at exit) and replays
# t0..t4 with two `tenure campaign` processes writing through the shared fence.
# scene-01 is frozen whole (tenure, its guard, its writer) past its TTL: woken,
# it acted on into scene-02's term (the overlap), its write is refused, and its
# acting record says so, late. `tenure dev` replays the same story for the pages.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked --quiet
export PATH="$PWD/target/release:$PATH"

work=$(mktemp -d)
export work
pids=()
group=
cleanup() {
  # A frozen writer's group wakes first: its guard ends it once tenure goes.
  [ -n "$group" ] && kill -CONT -- "-$group" 2>/dev/null || true
  # Newest first: the campaigns resign while etcd is still up, then etcd goes.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[i]}
    kill -CONT "$p" 2>/dev/null || true
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=23790
while ! port_free "$port" || ! port_free $((port + 1)); do port=$((port + 2)); done
endpoint="http://127.0.0.1:$port"
etcd --name demo --data-dir "$work/etcd" \
  --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
  --listen-peer-urls "http://127.0.0.1:$((port + 1))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))" \
  --initial-cluster "demo=http://127.0.0.1:$((port + 1))" >"$work/etcd.log" 2>&1 &
pids+=($!)
export TENURE_ENDPOINTS="$endpoint" ETCDCTL_API=3
for _ in $(seq 100); do etcdctl --endpoints="$endpoint" endpoint health >/dev/null 2>&1 && break; sleep 0.1; done
etcdctl --endpoints="$endpoint" endpoint health >/dev/null 2>&1 || { cat "$work/etcd.log"; exit 1; }
echo "etcd is up at $endpoint (data in $work)"

# Each scene writes the shared "scores" resource through the fence twice a
# second; its pid tells the story which process group to freeze.
writer='echo $$ >"$work/$TENURE_HOLDER.pid"
while :; do
  if out=$(tenure fence boss-fight scores --token "$TENURE_TOKEN"); then
    echo "    $TENURE_HOLDER wrote scores with token $TENURE_TOKEN"
  else
    echo "    $TENURE_HOLDER was REFUSED: $out"
  fi
  sleep 0.5
done'

echo
echo "t0  scene-01 takes the leader key and settles the boss fight"
tenure campaign boss-fight --id scene-01 --ttl 2 -- sh -c "$writer" &
scene1=$!; pids+=("$scene1")
until tenure leader boss-fight >/dev/null 2>&1; do sleep 0.1; done
echo "    scene-02 campaigns too, and waits (watching the key, not polling)"
tenure campaign boss-fight --id scene-02 --ttl 5 --wait -- sh -c "$writer" &
pids+=($!)
sleep 2
old=$(tenure leader boss-fight --json | sed -n 's/.*"token":\([0-9]*\).*/\1/p')

echo
echo "t1  scene-01 freezes whole (SIGSTOP to tenure, its guard and its writer: a paused VM, a"
echo "    long GC). Nothing of it can tell, or stop its writer, until it runs again."
group=$(ps -o pgid= -p "$(cat "$work/scene-01.pid")" | tr -d ' ')
kill -STOP -- "-$group"
kill -STOP "$scene1"
until tenure leader boss-fight 2>/dev/null | grep -q '^scene-02 '; do sleep 0.1; done
echo
echo "t2  scene-01's lease expired; etcd deleted the key; $(tenure leader boss-fight)"
sleep 3

echo
echo "t3  scene-01 resumes: its writer first, still believing it leads, writes..."
for p in $(pgrep -g "$group"); do [ "$p" = "$group" ] || kill -CONT "$p"; done
sleep 1.2
kill -CONT "$scene1"
kill -CONT -- "-$group"
set +e; wait "$scene1"; code=$?; set -e
group=
echo "    ...then its guard and tenure end it: exit $code. It acted on into scene-02's term,"
echo "    and says so in its acting record (late: it was sent after its lease could expire):"
etcdctl --endpoints="$endpoint" get --print-value-only 'election/~acting/boss-fight' | sed 's/^/    /'
echo "    (tenure serve draws that overlap in red beside scene-02's term: tenure dev replays this story)"

echo
echo "t4  prevented: a write with scene-01's token $old is refused by the shared fence:"
tenure fence boss-fight scores --token "$old" || true
echo "    and the refusal is recorded in etcd for every watcher:"
etcdctl --endpoints="$endpoint" get --prefix fence/boss-fight/ | sed 's/^/    /'

echo
if [ -t 0 ]; then
  echo "scene-02 keeps leading. Try: TENURE_ENDPOINTS=$endpoint tenure leader boss-fight --json"
  echo "Press Ctrl-C to stop (etcd and its data go with it)."
  wait
fi
