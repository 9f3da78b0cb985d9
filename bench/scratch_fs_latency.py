"""How long the delay line's file operations take on a disk and on tmpfs, while other work runs.

Every 200 ms: open, write and rename a small stats file (what bsz-delayline does with -s); every
1 ms: a write to an mmap'd page (its -q status page). Each on DISK_DIR and on TMPFS_DIR, in one
loop. Logs, with the wall time, every operation over 5 ms, every loop over 20 ms late, and every
200 ms in which a CPU lost over 20 ms to steal time (the hypervisor), so a slow file operation can
be told from a descheduled process.

    python3 bench/scratch_fs_latency.py SECONDS [DISK_DIR] > log
"""

import mmap
import os
import shutil
import sys
import time

dur = float(sys.argv[1])
disk = sys.argv[2] if len(sys.argv) > 2 else "/run/bsz-fsprobe"
res = {}
made = [d for d in (disk, "/dev/shm/bsz-fsprobe") if not os.path.exists(d)]  # removed at the end
for name, d in (("disk", disk), ("tmpfs", "/dev/shm/bsz-fsprobe")):
    os.makedirs(d, mode=0o755, exist_ok=True)
    fd = os.open(f"{d}/page", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(fd, 4096)
    res[name] = {"m": mmap.mmap(fd, 4096), "d": d}


def steal():
    out = []
    for line in open("/proc/stat"):
        if line.startswith("cpu") and line[3].isdigit():
            f = line.split()
            out.append(int(f[8]))
    return out


hz = os.sysconf("SC_CLK_TCK")
t_end = time.monotonic() + dur
next_stats = time.monotonic()
last_steal = steal()
i = 0
last_loop = time.monotonic()


def log(msg):
    print(f"{time.time():.3f} {msg}", flush=True)


while time.monotonic() < t_end:
    now = time.monotonic()
    if now - last_loop > 0.02:
        log(f"loop late {1e3 * (now - last_loop):.1f} ms")
    last_loop = now
    for name, r in res.items():
        t0 = time.monotonic_ns()
        r["m"][0:8] = i.to_bytes(8, "little")
        dt = time.monotonic_ns() - t0
        if dt > 5e6:
            log(f"{name} page write {dt / 1e6:.1f} ms")
    if now >= next_stats:
        for name, r in res.items():
            t0 = time.monotonic_ns()
            with open(f"{r['d']}/stats.tmp", "w") as f:
                f.write(f'{{"x": {i}}}\n' * 20)  # about the size of the delay line's stats
            os.rename(f"{r['d']}/stats.tmp", f"{r['d']}/stats.json")
            dt = time.monotonic_ns() - t0
            if dt > 5e6:
                log(f"{name} stats rewrite {dt / 1e6:.1f} ms")
        s = steal()
        d = [(b - a) * 1000 / hz for a, b in zip(last_steal, s, strict=True)]
        last_steal = s
        if max(d) > 20:
            log(f"steal ms per cpu {d}")
        next_stats += 0.2
    i += 1
    time.sleep(0.001)
log("end")
for r in res.values():
    r["m"].close()
for d in made:
    shutil.rmtree(d)
