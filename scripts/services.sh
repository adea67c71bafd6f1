#!/usr/bin/env bash
# Start the local services the test suite talks to when they are down (PostgreSQL, Redis, RabbitMQ).
# Idempotent: a running service is left alone. Prints one line per service it had to start.
set -u
up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! up 5432 && command -v pg_ctlcluster >/dev/null 2>&1; then
  echo "services: starting PostgreSQL" >&2
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
fi
if ! up 6379 && command -v redis-server >/dev/null 2>&1; then
  echo "services: starting Redis" >&2
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
fi
if ! up 5672 && command -v rabbitmq-server >/dev/null 2>&1; then
  echo "services: starting RabbitMQ" >&2
  rabbitmq-server -detached || true
fi
for i in $(seq 1 60); do
  missing=""
  up 5432 || missing="$missing postgresql:5432"
  up 6379 || missing="$missing redis:6379"
  up 5672 || missing="$missing rabbitmq:5672"
  [ -z "$missing" ] && exit 0
  sleep 1
done
echo "services: still down after 60 s:$missing (tests that need them will fail naming them)" >&2
exit 0
