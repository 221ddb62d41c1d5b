#!/bin/sh
# The official postgres image's first start, the parts docker-compose.yml uses: as root,
# own the data directory and drop to postgres; on an empty PGDATA, initdb with
# POSTGRES_USER as the superuser and POSTGRES_PASSWORD as its password, create POSTGRES_DB,
# listen everywhere with scram-sha-256 for every host; then the server in the foreground.
set -eu
: "${PGDATA:=/var/lib/postgresql/data}"
if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown -R postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi
user=${POSTGRES_USER:-postgres}
db=${POSTGRES_DB:-$user}
if [ "${1:-}" = postgres ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "docker-entrypoint: POSTGRES_PASSWORD is not set" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
    initdb -D "$PGDATA" -U "$user" --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
        --auth-local=trust --auth-host=scram-sha-256 >/dev/null
    rm -f "$pwfile"
    echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
    echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
    if [ "$db" != postgres ]; then
        pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
        psql -v ON_ERROR_STOP=1 -U "$user" -d postgres -q \
            -c "CREATE DATABASE \"$db\" OWNER \"$user\""
        pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    fi
    echo "docker-entrypoint: initialised $PGDATA (user $user, database $db)"
fi
exec "$@"
