"""System probes: one parser each for /proc/stat and /proc/diskstats, the whole disk behind
a path (also on a partition), its read-ahead; the process counters."""

import os
import shutil
import subprocess

import pytest

from hpcio.fsutil import evict
from hpcio.measure import probes
from common.launch import launch


def test_cpu_and_machine():
    user, system, iowait, idle, total = probes.cpu_jiffies()
    assert total >= user + system + iowait + idle > 0
    busy, all_, disk = probes.machine_busy()
    assert 0 <= busy <= all_ and disk >= 0
    assert probes.loadavg() >= 0
    assert probes.rss_bytes() > 0


def test_counters_and_delta():
    a = probes.counters()
    with open(__file__, "rb") as f:
        f.read()
    d = probes.delta(a, probes.counters())
    assert d["io"]["rchar"] > 0 and d["io"]["syscr"] >= 1
    assert d["rusage"]["maxrss_kib"] == probes.rusage()["maxrss_kib"]  # a level, kept


def test_not_a_block_device(tmp_path):
    # /proc is not on a block device: no disk, every whole disk is watched instead
    assert probes.block_device("/proc/self") is None
    assert probes.data_disks("/proc/self") == probes.whole_disks()
    assert probes.disk_read_bytes(["no-such-disk"]) is None


def test_root_disk_agrees_everywhere(tmp_path):
    dev = probes.block_device(str(tmp_path))
    if dev is None:
        pytest.skip("the temporary directory is not on a local block device")
    assert dev in probes.whole_disks()
    assert probes.data_disks(str(tmp_path)) == [dev]
    assert probes.disk_read_bytes([dev]) > 0


def _sh(*cmd):
    return launch(cmd, check=True).stdout.strip()


@pytest.fixture
def partition(tmp_path):
    """An ext4 file system on partition 1 of a loop device, mounted (root only)."""
    if os.geteuid() != 0 or not all(shutil.which(c) for c in ("losetup", "addpart", "delpart",
                                                              "mkfs.ext4", "mount")):
        pytest.skip("needs root, losetup, addpart and mkfs.ext4 for a partitioned device")
    img = tmp_path / "disk.img"
    with open(img, "wb") as f:
        f.truncate(64 << 20)
    try:
        loop = _sh("losetup", "--show", "-f", str(img))
    except subprocess.CalledProcessError as e:
        pytest.skip(f"no loop device: {e.stderr.strip()}")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    name, node = os.path.basename(loop), loop + "p1"
    mounted = made = parted = False
    try:
        if os.path.exists(f"/sys/block/{name}/{name}p1"):  # left by an earlier user
            _sh("delpart", loop, "1")
        _sh("addpart", loop, "1", "2048", str((64 << 20) // 512 - 2048))
        parted = True
        if not os.path.exists(node):  # no udev here: make the node from sysfs
            with open(f"/sys/block/{name}/{name}p1/dev") as f:
                major, minor = f.read().split(":")
            os.mknod(node, 0o600 | 0o060000, os.makedev(int(major), int(minor)))
            made = True
        _sh("mkfs.ext4", "-q", node)
        _sh("mount", node, str(mnt))
        mounted = True
        yield name, mnt
    finally:
        if mounted:
            launch(["umount", str(mnt)], check=False, capture=False, text=False)
        if made:
            os.unlink(node)
        if parted:
            launch(["delpart", loop, "1"], check=False, capture=False, text=False)
        launch(["losetup", "-d", loop], check=False, capture=False, text=False)


def test_partition_resolves_to_whole_disk(partition):
    disk, mnt = partition
    path = mnt / "data.bin"
    with open(path, "wb") as f:
        f.write(os.urandom(4 << 20))
    evict(str(path))
    # a file on loopNp1 is counted on loopN, the disk that read-ahead and the queue act on
    assert probes.block_device(str(path)) == disk
    assert probes.data_disks(str(path)) == [disk]
    assert probes.read_ahead_kb(str(path)) >= 0
    before = probes.disk_read_bytes([disk])
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass
    assert probes.disk_read_bytes([disk]) - before >= 4 << 20
