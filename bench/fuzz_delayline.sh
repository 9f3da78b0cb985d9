#!/bin/bash
# The delay line's libFuzzer target (topologies/delayline/fuzz_parsers.c) for longer than CI gives
# it: SECONDS_TO_RUN (default 600) from the committed seeds plus what earlier runs found, then the
# final stats appended to bench/results/fuzz-delayline.md by hand from the log it prints.
#   bash bench/fuzz_delayline.sh 600
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
make -s -C topologies/delayline fuzz
corpus=topologies/delayline/fuzz-corpus  # kept between runs (not committed)
mkdir -p "$corpus"
.venv/bin/python -c 'import sys; sys.path.insert(0, "tests"); from pathlib import Path; import tempfile, shutil
from test_delayline_libfuzzer import seeds
d = Path(tempfile.mkdtemp()) / "s"; seeds(d)
for f in d.iterdir(): shutil.copy(f, sys.argv[1])' "$corpus"
mkdir -p /tmp/bsz-fuzz-artifacts
ASAN_OPTIONS=detect_leaks=0 exec topologies/delayline/bsz-fuzz-parsers -artifact_prefix=/tmp/bsz-fuzz-artifacts/ -max_total_time="$seconds" -detect_leaks=0 -timeout=5 \
  -rss_limit_mb=2048 -close_fd_mask=2 -print_final_stats=1 "$corpus"
