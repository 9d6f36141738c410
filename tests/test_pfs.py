"""scripts/pfs-local.sh: a real GlusterFS volume (glusterd and 2 bricks in a network namespace,
FUSE-mounted), with per-request delay, for hpcio's runs against network storage.

Needs root and Debian's glusterfs packages (the script installs them; the test skips when it
cannot). It brings a testbed up and down, runs ``hpcio.demo`` on it at a tiny size, and every
checkpoint writer at 4 ranks through the mount (~80 s in all): it runs in its own CI lane
(.ci/lane-pfs); ``make test`` deselects it (``-m "not lane"``).
"""

import json
import os
import sys
import time

import pytest

from hpcio import demo
from hpcio.cache import cold_scope
from common.failure import one_line
from common.launch import launch
from common.mpi import run_mpi

pytestmark = [pytest.mark.slow, pytest.mark.mpi, pytest.mark.lane]  # daemons, a mount, ~70 s

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "pfs-local.sh")
STATE = "/run/hpcio-pfs"
NETNS = "hpcio-pfs"
DELAY_US = 500
SMALL = 120                     # small files timed cold, with and without the delay


def pfs(*args, user=None, timeout=180):
    cmd = [SCRIPT, *map(str, args)]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
    return launch(cmd, timeout=timeout)


def namespace_up():
    out = launch(["ip", "netns", "list"]).stdout
    return any(line.split()[0] == NETNS for line in out.splitlines() if line.strip())


def mounted(path):
    with open("/proc/mounts") as f:
        return any(line.split()[1] == path for line in f)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"   # a zombie has ended
    except FileNotFoundError:
        return False


def state():
    with open(os.path.join(STATE, "state")) as f:
        return dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)


def one_error_line(p):
    return one_line(p, "pfs-local: ", raw=True)


def cold_small_reads(d, n):
    """Seconds a fresh process takes to open and read n small files after drop_caches."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    code = ("import os, sys, time\n"
            "t = time.perf_counter()\n"
            f"for i in range({n}):\n"
            f"    with open(os.path.join({d!r}, f's{{i:04d}}'), 'rb') as f: f.read()\n"
            "print(time.perf_counter() - t)")
    p = launch([sys.executable, "-c", code], timeout=120)
    assert p.returncode == 0, p.stderr
    return float(p.stdout)


@pytest.fixture(scope="module")
def testbed(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespace, FUSE mount)")
    if namespace_up() or pfs("status").returncode == 0:
        pytest.skip(f"a testbed is already up here ({STATE}); not touching it")
    tmp = tmp_path_factory.mktemp("pfs")
    mnt, data = str(tmp / "mnt"), str(tmp / "data")
    p = pfs("start", "--delay-us", DELAY_US, "--mount", mnt, "--data", data)
    if p.returncode and ("cannot install" in p.stderr or "/dev/fuse" in p.stderr):
        pytest.skip(p.stderr.strip())
    assert p.returncode == 0, p.stderr
    yield {"mount": mnt, "data": data, "tmp": tmp, **state()}
    pfs("stop", "--wipe", "--data", data)   # when a test failed before test_stop_leaves_nothing


def test_status_reports_every_component_up(testbed):
    p = pfs("status")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == ["namespace", "glusterd", "volume", "mount",
                                                 "delay"]
    assert f"{DELAY_US} us per request" in lines[4]
    assert "2/2 bricks online" in lines[2]
    assert mounted(testbed["mount"])


def test_files_written_through_the_mount_read_back_and_spread_over_both_bricks(testbed):
    mnt, data = testbed["mount"], testbed["data"]
    blobs = {f"f{i:02d}": os.urandom(256 * 1024 + i) for i in range(16)}
    for name, blob in blobs.items():
        with open(os.path.join(mnt, name), "wb") as f:
            f.write(blob)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3")
    for name, blob in blobs.items():
        with open(os.path.join(mnt, name), "rb") as f:
            assert f.read() == blob
    on = [sum(os.path.exists(os.path.join(data, b, n)) for n in blobs)
          for b in ("brick0", "brick1")]
    assert sum(on) == len(blobs) and min(on) > 0, on    # distributed, one copy each


def test_delay_is_real(testbed):
    d = os.path.join(testbed["mount"], "small")
    os.mkdir(d)
    for i in range(SMALL):
        with open(os.path.join(d, f"s{i:04d}"), "wb") as f:
            f.write(os.urandom(4096))
    # other work on the machine only adds time: the least of a few runs is the truest
    slow = min(cold_small_reads(d, SMALL) for _ in range(2)) / SMALL
    p = pfs("delay", 0)
    assert p.returncode == 0, p.stderr
    fast = min(cold_small_reads(d, SMALL) for _ in range(3)) / SMALL
    assert pfs("delay", DELAY_US).returncode == 0
    # a cold open+read is a LOOKUP, an OPEN, a READ and a FLUSH at a brick, one after the
    # other, each delayed: at least 3 delays per file, and at least half of that added
    delay = DELAY_US * 1e-6
    assert slow >= 3 * delay, (slow, fast)
    assert slow - fast >= 1.5 * delay, (slow, fast)


def test_checkpoints_at_four_ranks_round_trip_through_the_mount(testbed):
    """Every checkpoint writer (DCP, torch.save, coordinated MPI-IO) at 4 ranks on the
    GlusterFS volume: written through the FUSE mount, each rank restores its own shard and its
    neighbour's, byte for byte (tests/mpi/check_checkpoint.py)."""
    d = os.path.join(testbed["mount"], "checkpoints")
    os.makedirs(d)
    check = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi", "check_checkpoint.py")
    p = run_mpi(4, [check, d], timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(ln for ln in p.stdout.splitlines() if ln.startswith("OK")) == \
        ["OK coordinated", "OK dcp", "OK torch_save"], p.stdout


def test_start_refused_while_up(testbed):
    other = testbed["tmp"] / "other"
    p = pfs("start", "--mount", other, "--data", testbed["tmp"] / "other-data")
    assert "already up" in one_error_line(p)
    assert not other.exists()
    assert pfs("status").returncode == 0


def test_not_root_refused(testbed):
    p = pfs("start", "--mount", testbed["tmp"] / "x", user=65534)
    assert "needs root" in one_error_line(p)


def test_cold_without_drop_caches_says_the_bricks_kept_their_pages(testbed):
    scope = cold_scope(os.path.join(testbed["mount"], "x"), asked=False, dropped=False)
    assert scope["testbed"] and scope["fs_type"] == "fuse.glusterfs"
    assert any("bricks' page cache" in c for c in scope["not_cleared"])
    scope = cold_scope(os.path.join(testbed["mount"], "x"), asked=True, dropped=True)
    assert scope["not_cleared"] == [] and "bricks" in scope["cleared"][-1]


def test_demo_runs_on_the_testbed_up_and_leaves_it_up(testbed):
    work = testbed["tmp"] / "demo"
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep +
               os.environ["PATH"])
    p = launch([sys.executable, "-m", "hpcio.demo", "--workdir", str(work),
                        "--records", "128", "--ranks", "1,2", "--local-ranks", "1",
                        "--repeats", "1", "--batch", "8"],
                       timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    out = p.stdout
    assert (f"GlusterFS testbed at {testbed['mount']}, {DELAY_US} us per request (up "
            f"already: used and left up)") in out
    assert "pfs-local: stopped" not in out and pfs("status").returncode == 0
    rows = out[out.index(f"GlusterFS testbed ({DELAY_US} us per request), 1 repeat(s)"):]
    rows = rows.splitlines()
    assert [r.split()[0] for r in rows[2:4]] == ["1", "2"]
    assert "bricks keep their pages; not cleared: none" in rows[4]
    assert "local disk, 1 repeat(s)" in out
    runs = sorted(os.listdir(work / "runs"))
    assert len(runs) == 6 and sum("-testbed-" in r for r in runs) == 4
    with open(work / "runs" / next(r for r in runs if "-testbed-" in r) / "summary.json") as f:
        cache = json.load(f)["cache"]
    assert cache["testbed"] and cache["drop_caches"] and cache["not_cleared"] == []
    assert sorted(d.rsplit("-", 1)[1] for d in os.listdir(work) if d.startswith("report-")) \
        == ["local", "testbed"]
    assert os.path.isfile(os.path.join(testbed["mount"], "hpcio-demo", "imagenet-128.lmdb",
                                       "hpcio.json"))


def test_stop_leaves_nothing(testbed):
    pids = [testbed["GLUSTERD"], testbed["CLIENT"]]
    bricks = launch(["ip", "netns", "pids", NETNS]).stdout.split()
    assert len(bricks) >= 3                     # glusterd and two bricks
    p = pfs("stop", "--wipe")
    assert p.returncode == 0, p.stderr
    assert not mounted(testbed["mount"])
    assert not os.path.exists(testbed["mount"])   # start made it, stop removed it
    assert not [pid for pid in pids + bricks if alive(int(pid))]
    assert not namespace_up()
    assert launch(["ip", "link", "show", "hpfs0"], text=False).returncode
    assert not os.path.exists(STATE)
    assert not os.path.exists(testbed["data"])
    assert pfs("status").returncode == 3


def test_non_empty_mount_point_refused_and_nothing_started(testbed):
    mnt = testbed["tmp"] / "busy"
    mnt.mkdir()
    (mnt / "keep").write_text("mine")
    t = time.monotonic()
    p = pfs("start", "--mount", mnt, "--data", testbed["tmp"] / "d2")
    assert "not empty" in one_error_line(p)
    assert time.monotonic() - t < 30
    assert (mnt / "keep").read_text() == "mine"
    assert not os.path.exists(STATE) and not namespace_up() and not mounted(str(mnt))


def test_state_left_by_a_testbed_that_no_longer_runs_does_not_block_start(testbed):
    """After a reboot or a kill -9, /run keeps the state of processes that are gone."""
    os.makedirs(STATE)
    gone = testbed["tmp"] / "gone"
    with open(os.path.join(STATE, "state"), "w") as f:
        f.write(f"DATA={testbed['tmp'] / 'old'}\nNETNS={NETNS}\nGLUSTERD=999999999\n"
                f"CLIENT=999999998\nMOUNT={gone}\n")
    mnt, data = testbed["tmp"] / "m3", testbed["tmp"] / "d3"
    try:
        p = pfs("start", "--mount", mnt, "--data", data)
        assert p.returncode == 0, p.stderr
        assert "no longer runs" in p.stderr and pfs("status").returncode == 0
        assert state()["MOUNT"] == str(mnt)
    finally:
        pfs("stop", "--wipe", "--data", data)
    assert not os.path.exists(STATE) and not namespace_up()


def test_demo_stops_the_testbed_it_started_also_on_error(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespace, FUSE mount)")
    if os.path.exists(STATE) or namespace_up():
        pytest.skip(f"a testbed is already up here ({STATE}); not touching it")
    mnt, data = str(tmp_path / "mnt"), str(tmp_path / "data")
    try:
        with pytest.raises(RuntimeError, match="inside"):
            with demo.testbed(DELAY_US, mount=mnt, data=data) as tb:
                assert tb.started and tb.delay_us == DELAY_US and tb.mount == mnt
                assert mounted(mnt)
                raise RuntimeError("inside")
        assert not mounted(mnt) and not namespace_up() and pfs("status").returncode == 3
    finally:
        pfs("stop", "--wipe", "--data", data)
