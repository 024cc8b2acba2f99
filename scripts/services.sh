#!/usr/bin/env bash
# Local services for the integration and end-to-end tests, without Docker, all on 127.0.0.1:
#   kafka       Apache Kafka 4.x, one KRaft broker+controller, run from Maven Central jars
#   nats        nats-server with JetStream (Debian package, installed when missing)
#   s3          moto's S3 server
#   clickhouse  the ClickHouse HTTP front over chDB (python -m tests.support.chfront)
# and two that start only when named (the change-data-capture tests name them):
#   postgres    PostgreSQL from the Debian package (postgresql, 15), wal_level=logical
#   connect     Kafka Connect, one standalone worker (same Kafka version as the broker) with
#               Debezium's PostgreSQL connector, run from Maven Central jars; needs kafka
#
# Usage: scripts/services.sh COMMAND [SERVICE...]
#   (no SERVICE = the first four for up/status/restart; all six for down and clean)
#   up | start    start what is not running, wait until it answers, write .services/env
#   down | stop   stop what runs (data is kept, so `start kafka` brings the same topics back)
#   restart       stop, then start
#   status        one line per service; exit 0 only when every named service answers
#   env           print the addresses as `export` lines (eval "$(scripts/services.sh env)"):
#                 SPATE_* for the tests, KAFKA_BROKERS and CLICKHOUSE_URL for the README's
#                 pipeline and the examples
#   clean         stop everything and delete .services/ (data and logs; the jar cache stays)
#   tools         install the Debian packages the services and tests need (nats-server,
#                 docker-compose); `up` does this too
#
# Every command is idempotent. Ports (override with the environment variables):
#   SPATE_KAFKA_PORT=19092  SPATE_KAFKA_CONTROLLER_PORT=19093  SPATE_NATS_PORT=14222
#   SPATE_S3_PORT=15000     SPATE_CLICKHOUSE_PORT=18123
#   SPATE_POSTGRES_PORT=15432  SPATE_CONNECT_PORT=18083 (Connect's REST API)
#   `up` remembers the ports it used in .services/ports; `env`, `status` and a later `up`
#   without the variables use those, so another shell needs no exports. A running service
#   is never moved: asking `up` for another port than it uses is refused (`down` first).
#   Kafka's TLS/SASL listeners take the next ports (+2..+4); a listener for fault tests
#   takes +5 (SPATE_KAFKA_FAULT_PORT) and is advertised at +6, the port a test's fault
#   proxy listens on (SPATE_KAFKA_FAULT_PROXY_PORT); a one-way TLS listener (the broker
#   shows a certificate, the client none) takes +7 (SPATE_KAFKA_SSL_SERVER_PORT).
# Data, logs and pid files live under .services/; Kafka jars are cached under .cache/kafka/,
# Connect's and Debezium's under .cache/connect/.
# When a service does not come up, the tail of its log is printed and the exit code is 1.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

SERVICES_DIR="$ROOT/.services"
LOG_DIR="$SERVICES_DIR/logs"
RUN_DIR="$SERVICES_DIR/run"
ENV_FILE="$SERVICES_DIR/env"
KAFKA_CACHE="$ROOT/.cache/kafka"
KAFKA_CONF_DIR="$ROOT/scripts/kafka"
CONNECT_CACHE="$ROOT/.cache/connect"
CONNECT_CONF_DIR="$ROOT/scripts/connect"
PY="$ROOT/.venv/bin/python"

PORTS_FILE="$SERVICES_DIR/ports"
# The port variables, in the order they are resolved (the Kafka listeners follow KAFKA_PORT).
PORT_VARS=(KAFKA_PORT KAFKA_CONTROLLER_PORT NATS_PORT S3_PORT CLICKHOUSE_PORT KAFKA_SSL_PORT
  KAFKA_SASL_SSL_PORT KAFKA_SASL_PLAINTEXT_PORT KAFKA_FAULT_PORT KAFKA_FAULT_PROXY_PORT
  KAFKA_SSL_SERVER_PORT POSTGRES_PORT CONNECT_PORT)

declare -A REMEMBERED=()
if [ -f "$PORTS_FILE" ]; then
  while IFS='=' read -r name value; do
    if [[ $name =~ ^[A-Z0-9_]+$ && $value =~ ^[0-9]+$ ]]; then
      REMEMBERED[$name]=$value
    fi
  done <"$PORTS_FILE"
fi

# The ports. `up` takes each from the shell's SPATE_* variable, else from the ports the
# last `up` here remembered in .services/ports, else the default, and remembers them; every
# other command reads the remembered ones, so a shell without the exports never points
# `env` or `status` at another checkout's services. The Kafka listeners follow KAFKA_PORT.
resolve_ports() {
  local mode=$1 var shell value kafka_moved=0
  local -A default=([KAFKA_PORT]=19092 [KAFKA_CONTROLLER_PORT]=19093 [NATS_PORT]=14222
    [S3_PORT]=15000 [CLICKHOUSE_PORT]=18123 [POSTGRES_PORT]=15432 [CONNECT_PORT]=18083)
  for var in "${PORT_VARS[@]}"; do
    shell="SPATE_$var"
    if [ "$mode" = remembered ] && [ -n "${REMEMBERED[$var]:-}" ]; then
      value=${REMEMBERED[$var]}
    elif [ -n "${!shell:-}" ]; then
      value=${!shell}
    elif [ -n "${REMEMBERED[$var]:-}" ] && [ "$kafka_moved" -eq 0 ]; then
      value=${REMEMBERED[$var]}
    elif [ -n "${default[$var]:-}" ]; then
      value=${default[$var]}
    else
      # Extra Kafka listeners: +2 mutual TLS, +3 SCRAM over TLS, +4 PLAIN, +5 a plaintext
      # listener advertised at a fault proxy's port (+6, the proxy forwards to it), +7
      # one-way TLS (the client checks the broker's certificate and presents none).
      case $var in
        KAFKA_SSL_PORT) value=$((KAFKA_PORT + 2)) ;;
        KAFKA_SASL_SSL_PORT) value=$((KAFKA_PORT + 3)) ;;
        KAFKA_SASL_PLAINTEXT_PORT) value=$((KAFKA_PORT + 4)) ;;
        KAFKA_FAULT_PORT) value=$((KAFKA_PORT + 5)) ;;
        KAFKA_FAULT_PROXY_PORT) value=$((KAFKA_PORT + 6)) ;;
        KAFKA_SSL_SERVER_PORT) value=$((KAFKA_PORT + 7)) ;;
      esac
    fi
    printf -v "$var" '%s' "$value"
    if [ "$var" = KAFKA_PORT ] && [ "$value" != "${REMEMBERED[KAFKA_PORT]:-$value}" ]; then
      kafka_moved=1
    fi
  done
}
resolve_ports remembered
KAFKA_SASL_USER=spate
KAFKA_SASL_PASSWORD=spate-test-password
KAFKA_HEAP_OPTS=${SPATE_KAFKA_HEAP_OPTS:--Xms256m -Xmx1g}
# The test broker starts often (every fault test restarts it) and never runs long: the client
# compiler alone (C1) and the serial collector start it in about 60% of the time the default
# tiered compilation and G1 take on two busy cores.
KAFKA_JVM_OPTS=${SPATE_KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:TieredStopAtLevel=1}
CONNECT_HEAP_OPTS=${SPATE_CONNECT_HEAP_OPTS:--Xms128m -Xmx768m}
READY_TIMEOUT=${SPATE_SERVICES_READY_TIMEOUT:-120}
STOP_TIMEOUT=${SPATE_SERVICES_STOP_TIMEOUT:-60}
ALL_SERVICES=(kafka nats s3 clickhouse)
# Started only when named: `up postgres connect` (connect needs kafka running).
OPTIONAL_SERVICES=(postgres connect)
KNOWN_SERVICES=("${ALL_SERVICES[@]}" "${OPTIONAL_SERVICES[@]}")
POSTGRES_USER=postgres

die() {
  echo "services: $*" >&2
  exit 1
}

usage() {
  sed -n '2,/^set /{/^#/p}' "$0" | sed 's/^# \{0,1\}//'
  exit 2
}

# ---------------------------------------------------------------- service table

service_port() {
  case $1 in
    kafka) echo "$KAFKA_PORT" ;;
    nats) echo "$NATS_PORT" ;;
    s3) echo "$S3_PORT" ;;
    clickhouse) echo "$CLICKHOUSE_PORT" ;;
    postgres) echo "$POSTGRES_PORT" ;;
    connect) echo "$CONNECT_PORT" ;;
  esac
}

service_address() {
  case $1 in
    kafka) echo "127.0.0.1:$KAFKA_PORT" ;;
    nats) echo "nats://127.0.0.1:$NATS_PORT" ;;
    s3) echo "http://127.0.0.1:$S3_PORT" ;;
    clickhouse) echo "http://127.0.0.1:$CLICKHOUSE_PORT" ;;
    postgres) echo "postgresql://$POSTGRES_USER@127.0.0.1:$POSTGRES_PORT/postgres" ;;
    connect) echo "http://127.0.0.1:$CONNECT_PORT" ;;
  esac
}

log_file() { echo "$LOG_DIR/$1.log"; }
pid_file() { echo "$RUN_DIR/$1.pid"; }

# ---------------------------------------------------------------- processes

# The pid in the pid file, if that process is alive and is ours (its command line names
# this repository, so a recycled pid is never mistaken for the service).
running_pid() {
  local pf pid
  pf=$(pid_file "$1")
  [ -f "$pf" ] || return 1
  pid=$(cat "$pf")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$ROOT" || return 1
  echo "$pid"
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

log_tail() {
  local log
  log=$(log_file "$1")
  echo "---- last lines of $log ----" >&2
  if [ -f "$log" ]; then
    tail -n "${SPATE_SERVICES_LOG_LINES:-40}" "$log" >&2
  else
    echo "(no log written)" >&2
  fi
  echo "----" >&2
}

# Runs "$@" in its own session (so stopping it stops its children too), detached from this
# shell, with stdout and stderr appended to the service log.
launch() {
  local name=$1
  shift
  local log
  log=$(log_file "$name")
  echo "==== $(date -u '+%Y-%m-%dT%H:%M:%SZ') starting: $*" >>"$log"
  # fd 9 holds this script's lock: the service must not inherit it.
  setsid "$@" </dev/null >>"$log" 2>&1 9>&- &
  echo $! >"$(pid_file "$name")"
}

stop_service() {
  local name=$1 pid waited=0
  if ! pid=$(running_pid "$name"); then
    rm -f "$(pid_file "$name")"
    echo "$name: not running"
    return 0
  fi
  if [ "$name" = postgres ]; then
    # SIGINT to the postmaster alone is PostgreSQL's fast shutdown: it ends the sessions
    # (Connect's replication connection too, which a TERM's smart shutdown would wait for).
    kill -INT "$pid" 2>/dev/null || true
  else
    # setsid made the service a process-group leader: signal the whole group.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  fi
  while kill -0 "$pid" 2>/dev/null; do
    if [ "$waited" -ge $((STOP_TIMEOUT * 10)) ]; then
      echo "$name: still running after ${STOP_TIMEOUT}s, killing pid $pid" >&2
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      break
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  rm -f "$(pid_file "$name")"
  echo "==== $(date -u '+%Y-%m-%dT%H:%M:%SZ') stopped" >>"$(log_file "$name")"
  echo "$name: stopped (pid $pid)"
}

# ---------------------------------------------------------------- readiness probes

# One attempt each; exit status 0 means the service answers like the real thing.
probe() {
  local name=$1
  case $name in
    kafka)
      "$PY" - "127.0.0.1:$KAFKA_PORT" 2>/dev/null <<'EOF'
import sys

from confluent_kafka.admin import AdminClient

# The broker is ready once it answers metadata and lists itself (an unfenced broker).
admin = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 0})
metadata = admin.list_topics(timeout=3)
sys.exit(0 if metadata.brokers else 1)
EOF
      ;;
    nats)
      # The server greets every connection with INFO {...}; JetStream must be on.
      local line
      line=$( (exec 4<>"/dev/tcp/127.0.0.1/$NATS_PORT" && read -r -t 3 greeting <&4 &&
        echo "$greeting") 2>/dev/null) || return 1
      [[ $line == INFO* && $line == *'"jetstream":true'* ]]
      ;;
    s3 | clickhouse)
      local url
      if [ "$name" = s3 ]; then url="http://127.0.0.1:$S3_PORT/"; else url="http://127.0.0.1:$CLICKHOUSE_PORT/ping"; fi
      "$PY" - "$url" "$name" 2>/dev/null <<'EOF'
import sys
import urllib.request

url, name = sys.argv[1], sys.argv[2]
with urllib.request.urlopen(url, timeout=3) as response:
    body = response.read()
# moto answers the bucket listing; the ClickHouse front answers /ping like ClickHouse.
ok = response.status == 200 and (name == "s3" or body == b"Ok.\n")
sys.exit(0 if ok else 1)
EOF
      ;;
    postgres)
      "$(postgres_bin_dir)/pg_isready" -q -h 127.0.0.1 -p "$POSTGRES_PORT" -U "$POSTGRES_USER" -t 3
      ;;
    connect)
      "$PY" - "http://127.0.0.1:$CONNECT_PORT/connector-plugins" 2>/dev/null <<'EOF'
import json
import sys
import urllib.request

# The worker is ready once its REST API lists Debezium's PostgreSQL connector.
with urllib.request.urlopen(sys.argv[1], timeout=3) as response:
    plugins = json.load(response)
names = {plugin.get("class") for plugin in plugins}
sys.exit(0 if "io.debezium.connector.postgresql.PostgresConnector" in names else 1)
EOF
      ;;
  esac
}

wait_ready() {
  local name=$1 deadline pid
  deadline=$((SECONDS + READY_TIMEOUT))
  while true; do
    if ! pid=$(running_pid "$name"); then
      echo "services: $name exited while starting ($(service_address "$name"))" >&2
      log_tail "$name"
      rm -f "$(pid_file "$name")"
      return 1
    fi
    if probe "$name"; then
      echo "$name: ready at $(service_address "$name") (pid $pid)"
      return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "services: $name did not answer at $(service_address "$name") within ${READY_TIMEOUT}s" >&2
      log_tail "$name"
      stop_service "$name" >/dev/null || true
      return 1
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- installation

apt_install() {
  local runner=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "need root (or sudo) to apt-get install $*"
    runner=(sudo)
  fi
  echo "services: installing $* (apt-get)"
  "${runner[@]}" apt-get update -qq >/dev/null ||
    die "apt-get update failed; install $* by hand"
  DEBIAN_FRONTEND=noninteractive "${runner[@]}" apt-get install -y -qq --no-install-recommends "$@" \
    >/dev/null || die "apt-get install $* failed"
}

# The newest PostgreSQL server installed by the Debian package (its binaries are not on PATH).
postgres_bin_dir() {
  local dir
  dir=$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n1)
  if [ -z "$dir" ] && command -v postgres >/dev/null; then dir=$(dirname "$(command -v postgres)"); fi
  [ -n "$dir" ] || return 1
  echo "$dir"
}

nats_server_bin() {
  command -v nats-server 2>/dev/null || { [ -x /usr/sbin/nats-server ] && echo /usr/sbin/nats-server; }
}

ensure_tools() {
  local missing=() name
  for name in "$@"; do
    if [ "$name" = postgres ] && ! postgres_bin_dir >/dev/null; then missing+=(postgresql); fi
  done
  nats_server_bin >/dev/null || missing+=(nats-server)
  # docker-compose only checks docker/compose.yaml in a test; it never runs containers here.
  command -v docker-compose >/dev/null || missing+=(docker-compose)
  if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
  fi
}

require_venv() {
  [ -x "$PY" ] || die "$PY not found: run scripts/bootstrap.sh first"
}

kafka_version() {
  sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$KAFKA_CONF_DIR/pom.xml"
}

connect_versions() {
  sed -n -e 's:.*<kafka.version>\(.*\)</kafka.version>.*:kafka \1:p' \
    -e 's:.*<debezium.version>\(.*\)</debezium.version>.*:debezium \1:p' "$CONNECT_CONF_DIR/pom.xml"
}

# Prints the directory holding the jars that POM_DIR/pom.xml names, fetching them from Maven
# Central once per pom.xml content into CACHE/LABEL-<hash of the pom>.
maven_jars() {
  local what=$1 pom_dir=$2 cache=$3 label=$4 key dir tmp
  key=$(sha256sum "$pom_dir/pom.xml" | cut -c1-12)
  dir="$cache/$label-$key"
  if [ ! -f "$dir/.complete" ]; then
    command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch the $what jars"
    echo "services: fetching the $what jars from Maven Central" >&2
    mkdir -p "$cache"
    tmp="$dir.tmp.$$"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    if ! mvn -q -B -f "$pom_dir/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$tmp" >"$cache/mvn.log" 2>&1; then
      tail -n 30 "$cache/mvn.log" >&2
      rm -rf "$tmp"
      die "could not fetch the $what jars (full output in $cache/mvn.log)"
    fi
    rm -rf "$dir"
    mv "$tmp" "$dir"
    touch "$dir/.complete"
  fi
  echo "$dir"
}

kafka_jars() {
  maven_jars "Apache Kafka $(kafka_version)" "$KAFKA_CONF_DIR" "$KAFKA_CACHE" "$(kafka_version)"
}

connect_jars() {
  local label
  label=$(connect_versions | tr ' \n' '-' | sed 's/-$//')
  maven_jars "Kafka Connect and Debezium ($(connect_versions | tr '\n' ' '))" \
    "$CONNECT_CONF_DIR" "$CONNECT_CACHE" "$label"
}

java_bin() {
  local java=${JAVA_HOME:+$JAVA_HOME/bin/}java
  command -v "$java" >/dev/null || die "Java 17 or newer is needed for Kafka ($java not found)"
  local major
  major=$("$java" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n1)
  [ "${major:-0}" -ge 17 ] || die "Kafka 4 needs Java 17 or newer (found ${major:-unknown})"
  echo "$java"
}

# ---------------------------------------------------------------- per-service start

# A CA, the broker's certificate (localhost) and a client certificate, made once per
# services directory with openssl; never committed. Kafka reads PEM key stores.
kafka_tls() {
  local dir=$1
  [ -f "$dir/broker-keystore.pem" ] && return 0
  mkdir -p "$dir"
  (
    cd "$dir"
    openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=spate test kafka CA" \
      -keyout ca.key -out ca.pem -addext "basicConstraints=critical,CA:TRUE" \
      -addext "keyUsage=critical,keyCertSign,cRLSign"
    local leaf
    for leaf in broker client; do
      openssl req -newkey rsa:2048 -nodes -subj "/CN=$leaf" -keyout "$leaf.key" -out "$leaf.csr"
      printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$leaf.ext"
      openssl x509 -req -in "$leaf.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
        -out "$leaf.pem" -extfile "$leaf.ext"
    done
    openssl pkcs8 -topk8 -nocrypt -in broker.key -out broker.pk8
    cat broker.pk8 broker.pem >broker-keystore.pem
  ) >>"$(log_file kafka)" 2>&1 || die "kafka: making the test certificates in $dir failed"
}

start_kafka() {
  local java jars home data props stamp
  java=$(java_bin)
  jars=$(kafka_jars)
  home="$SERVICES_DIR/kafka"
  data="$home/data"
  props="$home/server.properties"
  mkdir -p "$home"
  # A KRaft log remembers its controller's address: new ports need a new data dir.
  stamp="$(kafka_version) $KAFKA_PORT $KAFKA_CONTROLLER_PORT security-2"
  if [ -f "$home/ports" ] && [ "$(cat "$home/ports")" != "$stamp" ]; then
    echo "kafka: version or ports changed, starting from an empty data dir"
    rm -rf "$data"
  fi
  kafka_tls "$home/tls"
  sed -e "s|@PORT@|$KAFKA_PORT|g" \
    -e "s|@CONTROLLER_PORT@|$KAFKA_CONTROLLER_PORT|g" \
    -e "s|@SSL_PORT@|$KAFKA_SSL_PORT|g" \
    -e "s|@SASL_SSL_PORT@|$KAFKA_SASL_SSL_PORT|g" \
    -e "s|@SASL_PLAINTEXT_PORT@|$KAFKA_SASL_PLAINTEXT_PORT|g" \
    -e "s|@FAULT_PORT@|$KAFKA_FAULT_PORT|g" \
    -e "s|@FAULT_PROXY_PORT@|$KAFKA_FAULT_PROXY_PORT|g" \
    -e "s|@SSL_SERVER_PORT@|$KAFKA_SSL_SERVER_PORT|g" \
    -e "s|@SASL_USER@|$KAFKA_SASL_USER|g" \
    -e "s|@SASL_PASSWORD@|$KAFKA_SASL_PASSWORD|g" \
    -e "s|@TLS_DIR@|$home/tls|g" \
    -e "s|@DATA_DIR@|$data|g" \
    "$KAFKA_CONF_DIR/server.properties.in" >"$props"
  local jvm=(-Dlog4j2.configurationFile="$KAFKA_CONF_DIR/log4j2.xml" -Djava.awt.headless=true)
  if [ ! -f "$data/meta.properties" ]; then
    local cluster_id
    rm -rf "$data"
    cluster_id=$("$java" "${jvm[@]}" -cp "$jars/*" kafka.tools.StorageTool random-uuid 2>>"$(log_file kafka)")
    "$java" "${jvm[@]}" -cp "$jars/*" kafka.tools.StorageTool format --standalone \
      -t "$cluster_id" -c "$props" \
      --add-scram "SCRAM-SHA-512=[name=$KAFKA_SASL_USER,password=$KAFKA_SASL_PASSWORD]" \
      >>"$(log_file kafka)" 2>&1 || {
      log_tail kafka
      die "kafka: formatting the KRaft storage in $data failed"
    }
    echo "$stamp" >"$home/ports"
  fi
  # shellcheck disable=SC2086  # the heap and JVM options are meant to split into words
  launch kafka "$java" $KAFKA_HEAP_OPTS $KAFKA_JVM_OPTS "${jvm[@]}" \
    -cp "$jars/*" kafka.Kafka "$props"
}

start_nats() {
  local bin
  bin=$(nats_server_bin) || die "nats-server not found (scripts/services.sh tools installs it)"
  mkdir -p "$SERVICES_DIR/nats"
  launch nats "$bin" -a 127.0.0.1 -p "$NATS_PORT" -js -sd "$SERVICES_DIR/nats"
}

start_s3() {
  [ -x "$ROOT/.venv/bin/moto_server" ] || die "moto_server not found in .venv (install moto[server])"
  # Through the venv's python so the command line names this repository (see running_pid).
  launch s3 "$PY" "$ROOT/.venv/bin/moto_server" -H 127.0.0.1 -p "$S3_PORT"
}

chfront_present() {
  [ -f "$ROOT/tests/support/chfront.py" ] || [ -f "$ROOT/tests/support/chfront/__main__.py" ]
}

start_clickhouse() {
  chfront_present || die "clickhouse: the HTTP front (python -m tests.support.chfront) is missing"
  mkdir -p "$SERVICES_DIR/clickhouse"
  launch clickhouse "$PY" -m tests.support.chfront --host 127.0.0.1 --port "$CLICKHOUSE_PORT" \
    --data-dir "$SERVICES_DIR/clickhouse"
}

# PostgreSQL refuses to run as root: as root, the cluster belongs to the postgres account.
AS_POSTGRES=()
if [ "$(id -u)" -eq 0 ]; then
  AS_POSTGRES=(setpriv --reuid="$POSTGRES_USER" --regid="$POSTGRES_USER" --init-groups --)
fi

# The cluster's directory: .services/postgres, unless this checkout lies where the postgres
# account cannot reach (a root-owned home, as root); then one per checkout under /var/tmp.
postgres_home() {
  if [ ${#AS_POSTGRES[@]} -gt 0 ] && ! "${AS_POSTGRES[@]}" test -x "$SERVICES_DIR" 2>/dev/null; then
    echo "/var/tmp/spate-postgres-$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)"
  else
    echo "$SERVICES_DIR/postgres"
  fi
}

start_postgres() {
  local bin home data
  bin=$(postgres_bin_dir) || die "postgres: no PostgreSQL server installed (apt-get install postgresql)"
  home=$(postgres_home)
  data="$home/data"
  mkdir -p "$home"
  if [ ${#AS_POSTGRES[@]} -gt 0 ]; then chown "$POSTGRES_USER:" "$home"; fi
  if [ ! -f "$data/PG_VERSION" ]; then
    rm -rf "$data"
    # Trust on loopback only (the server listens on 127.0.0.1 alone); replication too.
    "${AS_POSTGRES[@]}" "$bin/initdb" -D "$data" -U "$POSTGRES_USER" --auth=trust -E UTF8 \
      --locale=C.UTF-8 >>"$(log_file postgres)" 2>&1 || {
      log_tail postgres
      die "postgres: initdb of $data failed"
    }
  fi
  # wal_level=logical for Debezium's pgoutput slots; no Unix socket (TCP on loopback only);
  # fsync off: the data is a test's and is made again by the next test. cluster_name puts
  # this checkout's path on the command line (see running_pid) wherever the data lives.
  launch postgres "${AS_POSTGRES[@]}" "$bin/postgres" -D "$data" -p "$POSTGRES_PORT" \
    -c listen_addresses=127.0.0.1 -c unix_socket_directories= -c wal_level=logical \
    -c max_wal_senders=20 -c max_replication_slots=20 -c fsync=off \
    -c synchronous_commit=off -c full_page_writes=off -c "cluster_name=spate $ROOT"
}

start_connect() {
  local java jars home versions
  java=$(java_bin)
  versions=$(connect_versions)
  [ "$(sed -n 's/^kafka //p' <<<"$versions")" = "$(kafka_version)" ] ||
    die "connect: scripts/connect/pom.xml names Kafka $(sed -n 's/^kafka //p' <<<"$versions")," \
      "the broker is $(kafka_version) (scripts/kafka/pom.xml): make them equal"
  probe kafka || die "connect: the broker does not answer at $(service_address kafka):" \
    "start it first (scripts/services.sh up kafka connect)"
  jars=$(connect_jars)
  home="$SERVICES_DIR/connect"
  mkdir -p "$home"
  sed -e "s|@KAFKA_PORT@|$KAFKA_PORT|g" -e "s|@CONNECT_PORT@|$CONNECT_PORT|g" \
    -e "s|@DATA_DIR@|$home|g" "$CONNECT_CONF_DIR/worker.properties.in" >"$home/worker.properties"
  # shellcheck disable=SC2086  # the heap and JVM options are meant to split into words
  launch connect "$java" $CONNECT_HEAP_OPTS $KAFKA_JVM_OPTS \
    -Dlog4j2.configurationFile="$CONNECT_CONF_DIR/log4j2.xml" -Djava.awt.headless=true \
    -cp "$jars/*" org.apache.kafka.connect.cli.ConnectStandalone "$home/worker.properties"
}

# ---------------------------------------------------------------- commands

write_env() {
  cat >"$ENV_FILE.tmp" <<EOF
SPATE_KAFKA_BOOTSTRAP=$(service_address kafka)
SPATE_KAFKA_SSL_BOOTSTRAP=localhost:$KAFKA_SSL_PORT
SPATE_KAFKA_SSL_SERVER_BOOTSTRAP=localhost:$KAFKA_SSL_SERVER_PORT
SPATE_KAFKA_SASL_SSL_BOOTSTRAP=localhost:$KAFKA_SASL_SSL_PORT
SPATE_KAFKA_SASL_PLAINTEXT_BOOTSTRAP=127.0.0.1:$KAFKA_SASL_PLAINTEXT_PORT
SPATE_KAFKA_FAULT_BOOTSTRAP=127.0.0.1:$KAFKA_FAULT_PROXY_PORT
SPATE_KAFKA_FAULT_UPSTREAM=127.0.0.1:$KAFKA_FAULT_PORT
SPATE_KAFKA_TLS_DIR=$SERVICES_DIR/kafka/tls
SPATE_KAFKA_SASL_USER=$KAFKA_SASL_USER
SPATE_KAFKA_SASL_PASSWORD=$KAFKA_SASL_PASSWORD
SPATE_NATS_URL=$(service_address nats)
SPATE_S3_ENDPOINT=$(service_address s3)
SPATE_CLICKHOUSE_URL=$(service_address clickhouse)
KAFKA_BROKERS=$(service_address kafka)
CLICKHOUSE_URL=$(service_address clickhouse)
SPATE_POSTGRES_PORT=$POSTGRES_PORT
SPATE_POSTGRES_DSN=$(service_address postgres)
SPATE_CONNECT_URL=$(service_address connect)
EOF
  mv "$ENV_FILE.tmp" "$ENV_FILE"
}

# `up`'s ports: the shell's choice where it makes one, but never a move of a running service
# (its clients were told the remembered address); then remembered for the other commands.
choose_ports() {
  local name var shell running=()
  for name in "${KNOWN_SERVICES[@]}"; do
    if running_pid "$name" >/dev/null; then running+=("$name"); fi
  done
  resolve_ports up
  if [ ${#running[@]} -gt 0 ]; then
    for var in "${PORT_VARS[@]}"; do
      shell="SPATE_$var"
      if [ -n "${REMEMBERED[$var]:-}" ] && [ "${!var}" != "${REMEMBERED[$var]}" ]; then
        die "$shell=${!var} asks for another port than the running ${running[*]} use" \
          "(${REMEMBERED[$var]}, remembered in $PORTS_FILE): run \`scripts/services.sh down\`" \
          "first to move them, or unset $shell"
      fi
    done
  fi
  : >"$PORTS_FILE.tmp"
  for var in "${PORT_VARS[@]}"; do
    echo "$var=${!var}" >>"$PORTS_FILE.tmp"
  done
  mv "$PORTS_FILE.tmp" "$PORTS_FILE"
}

start_one() {
  local name=$1 pid
  if pid=$(running_pid "$name"); then
    echo "$name: already running (pid $pid)"
  else
    port_open "$(service_port "$name")" &&
      die "$name: port $(service_port "$name") on 127.0.0.1 is taken by another process" \
        "(stop it, or choose another port with SPATE_${name^^}_PORT)"
    "start_$name"
  fi
}

cmd_up() {
  local name failed=0 started=()
  require_venv
  ensure_tools "$@"
  choose_ports
  write_env
  # Start everything first and wait afterwards: the JVM and chDB take seconds to load.
  # Connect goes last, once the broker answers (its worker exits without one).
  local later=()
  for name in "$@"; do
    if [ "$name" = connect ]; then
      later+=("$name")
      continue
    fi
    start_one "$name"
    started+=("$name")
  done
  for name in "${started[@]}"; do
    wait_ready "$name" || failed=1
  done
  for name in "${later[@]}"; do
    [ "$failed" -eq 0 ] || break
    start_one "$name"
    wait_ready "$name" || failed=1
  done
  [ "$failed" -eq 0 ] || die "some services did not start (logs in $LOG_DIR)"
  echo "services: addresses in $ENV_FILE"
}

cmd_down() {
  local i
  # Reverse order, so the broker goes last (nothing here depends on it, but logs read better).
  for ((i = $# ; i > 0; i--)); do
    stop_service "${!i}"
  done
}

cmd_status() {
  local name pid all_ok=0
  for name in "$@"; do
    if pid=$(running_pid "$name"); then
      if probe "$name"; then
        printf '%-11s running  pid %-8s %s\n' "$name" "$pid" "$(service_address "$name")"
      else
        printf '%-11s starting pid %-8s %s (not answering yet)\n' "$name" "$pid" \
          "$(service_address "$name")"
        all_ok=3
      fi
    else
      local note=""
      if [ "$name" = clickhouse ] && ! chfront_present; then
        note=" (python -m tests.support.chfront is missing)"
      elif port_open "$(service_port "$name")"; then
        note=" (port $(service_port "$name") is held by another process)"
      fi
      printf '%-11s stopped%s\n' "$name" "$note"
      all_ok=3
    fi
  done
  return "$all_ok"
}

# A note on stderr for each SPATE_*_PORT of this shell that the remembered ports override.
note_ignored_ports() {
  local var shell
  for var in "${PORT_VARS[@]}"; do
    shell="SPATE_$var"
    if [ -n "${!shell:-}" ] && [ "${!shell}" != "${!var}" ]; then
      echo "services: $shell=${!shell} ignored: this checkout's services were started on" \
        "${!var} (remembered in $PORTS_FILE; \`down\`, then \`up\` to move them)" >&2
    fi
  done
}

main() {
  [ $# -ge 1 ] || usage
  local command=$1
  shift
  local services=("$@") name
  if [ ${#services[@]} -eq 0 ]; then
    case $command in
      down | stop) services=("${KNOWN_SERVICES[@]}") ;;
      *) services=("${ALL_SERVICES[@]}") ;;
    esac
  fi
  for name in "${services[@]}"; do
    case " ${KNOWN_SERVICES[*]} " in
      *" $name "*) ;;
      *) die "unknown service '$name' (known: ${KNOWN_SERVICES[*]})" ;;
    esac
  done

  mkdir -p "$LOG_DIR" "$RUN_DIR"
  # One invocation at a time per checkout: concurrent `up`s must not start two brokers.
  exec 9>"$RUN_DIR/lock"
  flock -w 600 9 || die "another scripts/services.sh is still running (lock $RUN_DIR/lock)"

  case $command in
    up | start) cmd_up "${services[@]}" ;;
    down | stop) cmd_down "${services[@]}" ;;
    restart)
      cmd_down "${services[@]}"
      cmd_up "${services[@]}"
      ;;
    status)
      note_ignored_ports
      cmd_status "${services[@]}"
      ;;
    env)
      note_ignored_ports
      write_env
      sed 's/^/export /' "$ENV_FILE"
      ;;
    clean)
      cmd_down "${KNOWN_SERVICES[@]}"
      exec 9>&-
      rm -rf "$(postgres_home)" "$SERVICES_DIR"
      echo "services: removed $SERVICES_DIR"
      ;;
    tools) ensure_tools "${services[@]}" ;;
    -h | --help | help) usage ;;
    *) usage ;;
  esac
}

main "$@"
