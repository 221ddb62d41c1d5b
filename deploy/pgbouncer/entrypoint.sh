#!/bin/sh
# Write PgBouncer's user list from the environment (the password never sits in the image),
# then run PgBouncer in the foreground.
set -eu
umask 077
user=$(printf '%s' "$PGBOUNCER_USER" | sed 's/"/""/g')
password=$(printf '%s' "$PGBOUNCER_PASSWORD" | sed 's/"/""/g')
printf '"%s" "%s"\n' "$user" "$password" > /var/lib/pgbouncer/userlist.txt
exec /usr/sbin/pgbouncer /etc/pgbouncer/pgbouncer.ini
