#!/bin/sh
# docs/install.md, Step 3's reconnect service, for the test bed: restart kubelet each time the
# relay path turns from a link into a socket. Arguments: the relay path, then the command that
# restarts kubelet (on a real node: systemctl restart kubelet).
p=$1; shift
serving() { [ -S "$p" ] && [ ! -L "$p" ]; }
was=$(serving && echo yes)
while sleep 2; do
  now=$(serving && echo yes)
  if [ "$now" = yes ] && [ "$was" != yes ]; then echo "$(date -u +%T) relay serving: restarting kubelet"; "$@"; fi
  was=$now
done
