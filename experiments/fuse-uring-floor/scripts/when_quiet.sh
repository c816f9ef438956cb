#!/bin/bash
# Runs bench.sh as soon as the machine has been >=90% idle for 3 s (checks for up to $1 s).
end=$(( $(date +%s) + ${1:-540} ))
while [ $(date +%s) -lt $end ]; do
  a=($(head -1 /proc/stat)); sleep 3; b=($(head -1 /proc/stat))
  tot=0; for i in 1 2 3 4 5 6 7 8; do tot=$((tot + b[i] - a[i])); done
  idle=$(( (b[4]-a[4]) * 100 / tot ))
  if [ $idle -ge 90 ]; then echo "idle ${idle}% over 3s at $(date -u +%T)"; exec "$(dirname "${BASH_SOURCE[0]}")/bench.sh"; fi
done
echo "never quiet"; uptime
