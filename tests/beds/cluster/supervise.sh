#!/bin/sh
# The test bed's systemd for kubelet, as kubeadm's kubelet.service has it (Restart=always,
# RestartSec=10): runs the command, and again each time it exits, after the delay. Each start
# touches a file (kubelet's start time, which the bed compares with the relay socket's), and each
# exit is a line in the log (stdout): "supervise: exited with status N; restart K in D s".
# SIGTERM or SIGINT stops the command and the supervisor, as `systemctl stop` does.
# Arguments: the delay in seconds, the file touched at each start, then the command.
delay=$1; started=$2; shift 2
child=
stop() {
  [ -n "$child" ] && kill -TERM "$child" 2>/dev/null && wait "$child"
  exit 0
}
trap stop TERM INT
restarts=0
while :; do
  touch "$started"
  "$@" &
  child=$!
  wait "$child"
  status=$?
  child=
  restarts=$((restarts + 1))
  echo "==== $(date -u '+%F %T') supervise: exited with status $status; restart $restarts in $delay s"
  sleep "$delay" &
  wait $!
done
