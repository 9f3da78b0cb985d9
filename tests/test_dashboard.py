"""A twin sweep's live page: Dask's dashboard, loaded in a real headless browser (Debian's Chromium)
while the sweep runs, lists the points running as tasks by name; and nothing of the cluster listens
on an address other than loopback."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import time
import urllib.parse

import psutil
import pytest
from conftest import BUFSIZE

CHROMIUM = shutil.which("chromium")


def running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def dump_dom(url: str) -> str:
    args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr[-1000:]
    return res.stdout


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (./setup.sh test installs it on Debian)")
def test_the_live_page_lists_the_running_points_and_listens_on_loopback_only(tmp_path):
    out = tmp_path / "sweep"
    args = [BUFSIZE, "sim", "sweep", "--flows", "200,100", "--seeds", "1", "--workers", "2", "--out", str(out)]
    sweep = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    try:
        assert sweep.stderr is not None
        page = None
        for line in sweep.stderr:
            if "live page: " in line:
                page = line.split("live page: ", 1)[1].strip()
                break
        assert page is not None and page.startswith("http://127.0.0.1:"), page
        base = page.rsplit("/", 1)[0]
        keys: set[str] = set()
        deadline = time.monotonic() + 30
        while keys != {"n0200-seed1", "n0100-seed1"} and time.monotonic() < deadline:
            workers = re.findall(r'href="\.\./worker/([^"]+)\.html"', dump_dom(f"{base}/info/main/workers.html"))
            assert len(workers) == 2, workers
            keys = set()
            for w in workers:
                assert urllib.parse.unquote(w).startswith("tcp://127.0.0.1:"), w
                keys |= set(re.findall(r"n\d{4}-seed\d+", dump_dom(f"{base}/info/worker/{w}.html")))
        assert keys == {"n0200-seed1", "n0100-seed1"}, keys
        family = [psutil.Process(sweep.pid), *psutil.Process(sweep.pid).children(recursive=True)]
        listening = [c.laddr for p in family for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN]
        assert listening and all(a.ip == "127.0.0.1" for a in listening), listening
        # Seen: the page is what this test is for. The sweep is stopped rather than waited for (its points
        # run to the end, and a stopped sweep leaves nothing running, in tests/test_sim_twin.py).
        sweep.send_signal(signal.SIGINT)
        _, err = sweep.communicate(timeout=120)
        assert sweep.returncode in (0, 130), err
        psutil.wait_procs([p for p in family if running(p)], timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
