#!/bin/sh
# A stand-in for torchrun/srun in guard's tests: prints a real NCCL log
# excerpt line by line with a delay, odd lines to stdout and even lines to
# stderr in red (ANSI colour, as many launchers print), then stays alive for
# HOLD seconds and exits with EXIT. SIGINT or SIGTERM ends it at once with
# a line saying so and status 130 or 143; with FAKE_IGNORE_TERM=1 it (and
# its children) ignore SIGTERM, as a hung job does.
#
# usage: fake-launcher.sh FILE DELAY HOLD EXIT
file=$1 delay=$2 hold=$3 code=$4
pid=
trap 'echo "fake-launcher: got SIGINT"; [ -n "$pid" ] && kill $pid; exit 130' INT
trap 'echo "fake-launcher: got SIGTERM"; [ -n "$pid" ] && kill $pid; exit 143' TERM
[ "$FAKE_IGNORE_TERM" = 1 ] && trap '' TERM
n=0
while IFS= read -r line; do
	n=$((n + 1))
	if [ $((n % 2)) -eq 1 ]; then
		printf '%s\n' "$line"
	else
		printf '\033[31m%s\033[0m\n' "$line" >&2
	fi
	sleep "$delay"
done < "$file"
# A background sleep and wait, so a trapped signal runs the trap at once.
sleep "$hold" &
pid=$!
wait $pid
exit "$code"
