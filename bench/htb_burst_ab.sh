#!/bin/bash
# Alternating A/B: HTB burst 1 frame (default) vs 10 frames, N=50 cubic, 1 BDP buffer, 20 s.
cd "$(dirname "$0")/.."  # the repo this script is in
for i in 1 2 3; do for b in 1514 15140; do
  .venv/bin/bufsize measure --flows 50 --hosts 50 --cc cubic --buffer-packets 464 --duration 20 --burst-bytes $b --json 2>/dev/null \
  | python3 -c "
import json,sys; d=json.load(sys.stdin); p=d['points'][0]; f=d['fidelity']
print(json.dumps({'run':$i,'burst':$b,'util':d['utilization'],'ref':d['reference_rate_mbps'],'empty':d['queue']['empty_fraction'],'qmean':d['queue']['mean_packets'],'gt10':f['frac_gt10'],'gt25':f['frac_gt25'],'min_sec':min(p['rates_mbps']),'idle':p['cpu']['idle']}))"
done; done
