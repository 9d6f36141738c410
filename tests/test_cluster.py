"""scripts/cluster-local.sh: a virtual cluster of 4 nodes (namespaces, each with its own
GlusterFS client of the testbed's volume, one slurmd each) and hpcio across it at 4 nodes x 2
ranks: per-node cold caches, node ids per rank, exactly-once delivery and the same bytes as on
one node, the job templates under sbatch -N 4, and the refusals.

Needs root (namespaces, FUSE mounts, a bridge), Debian's glusterfs and slurm-wlm (the scripts
install them). A few minutes: its own CI lane (.ci/lane-cluster); ``make test`` deselects it.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.datasets import make_dataset
from common.failure import one_line
from common.mpi import once_more
from common.launch import PIPE, launch, spawn

pytestmark = [pytest.mark.slow, pytest.mark.mpi, pytest.mark.lane]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "cluster-local.sh")
PFS = os.path.join(ROOT, "scripts", "pfs-local.sh")
CHECK = os.path.join(ROOT, "tests", "mpi", "check_readers.py")
STATE = "/run/hpcio-cluster"
NODES, PPN = 4, 2
HOSTS = [f"hpcio-n{k}" for k in range(1, NODES + 1)]

if os.geteuid() != 0:
    pytest.skip("needs root (namespaces, FUSE mounts, a bridge)", allow_module_level=True)
if shutil.which("glusterfs") is None or shutil.which("unshare") is None:
    pytest.skip("needs glusterfs and unshare (scripts/pfs-local.sh installs glusterfs)",
                allow_module_level=True)


def cluster(*args, env=None, user=None, timeout=300):
    cmd = [SCRIPT, *map(str, args)]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
    e = dict(os.environ, **(env or {}))
    return launch(cmd, timeout=timeout, env=e,
                          cwd=ROOT)


def one_error_line(p):
    return one_line(p, "cluster-local: ", raw=True)


def nothing_left():
    """No state, bridge or node links of a cluster (the holders go with the state)."""
    links = launch(["ip", "-o", "link"]).stdout
    assert not os.path.exists(STATE)
    assert not re.search(r"\b(hpcbr0|hpcn\d+h)\b", links), links
    with open("/proc/mounts") as f:
        assert "hpcio-cluster" not in f.read()


@pytest.fixture(scope="module")
def testbed(tmp_path_factory):
    """The GlusterFS testbed: the one up here, else one of our own for this module."""
    if os.path.exists(STATE):
        pytest.skip(f"a cluster is already up ({STATE}): not ours to stop")
    if launch([PFS, "status"], text=False).returncode == 0:
        with open("/run/hpcio-pfs/state") as f:
            yield dict(ln.rstrip("\n").split("=", 1) for ln in f if "=" in ln)["MOUNT"]
        return
    tmp = tmp_path_factory.mktemp("pfs")
    p = launch([PFS, "start", "--mount", tmp / "mnt", "--data", tmp / "data"],
                       timeout=300)
    if p.returncode != 0:
        pytest.skip(f"no GlusterFS testbed: {p.stderr.strip()}")
    try:
        yield str(tmp / "mnt")
    finally:
        launch([PFS, "stop", "--wipe"], timeout=120, text=False)


def fake(tmp_path, name, line):
    """A PATH directory whose ``name`` fails with ``line``: a daemon that does not come up."""
    d = tmp_path / "fake"
    d.mkdir(exist_ok=True)
    (d / name).write_text(f"#!/bin/sh\necho '{line}' >&2\nexit 1\n")
    (d / name).chmod(0o755)
    return {"PATH": f"{d}:{os.environ['PATH']}"}


# --- refusals: before the module's cluster is up -------------------------------------------

def test_more_nodes_than_the_machine_holds():
    line = one_error_line(cluster("start", "--nodes", 999))
    assert "holds at most" in line
    nothing_left()


def test_needs_root():
    line = one_error_line(cluster("start", "--nodes", 2, user="65534"))
    assert "needs root" in line


def test_a_mount_that_does_not_come_up_leaves_nothing(testbed, tmp_path):
    p = cluster("start", "--nodes", 2, "--no-slurm",
                env=fake(tmp_path, "glusterfs", "fake glusterfs: transport endpoint refused"))
    line = one_error_line(p)
    assert "hpcio-n1: mount" in line and "refused" in line
    nothing_left()


def test_state_left_by_a_cluster_that_no_longer_runs_does_not_block_start(testbed, tmp_path):
    """After a reboot or a kill -9, /run keeps the state of nodes that are gone: start
    clears it (signalling none of its pids, which others may hold now) and goes on."""
    os.makedirs(STATE)
    with open(os.path.join(STATE, "state"), "w") as f:
        f.write(f"NODES=2\nHOLDER1={os.getpid()}\nNSIDS1='uts:[1] net:[1] mnt:[1] '\n"
                f"HOLDER2=999999999\nSLURMCTLD={os.getpid()}\n")
    p = cluster("start", "--nodes", 2, "--no-slurm",
                env=fake(tmp_path, "glusterfs", "fake glusterfs: transport endpoint refused"))
    assert "no longer runs" in p.stderr
    assert "hpcio-n1: mount" in p.stderr and p.returncode != 0     # it went on to start
    nothing_left()


def test_a_slurmd_that_does_not_come_up_leaves_nothing(testbed, tmp_path):
    if shutil.which("slurmd") is None:
        pytest.skip("no slurm-wlm here (apt-get install slurm-wlm)")
    t = time.monotonic()
    p = cluster("start", "--nodes", 2, env=fake(tmp_path, "slurmd", "fake slurmd: refused"))
    line = one_error_line(p)
    assert "hpcio-n1: slurmd did not come up" in line and "refused" in line
    assert time.monotonic() - t < 50       # a dead slurmd is not waited for
    nothing_left()


# --- the cluster -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def up(testbed, tmp_path_factory):
    """4 nodes up (with Slurm when slurm-wlm is here); stopped at the end, whatever happens."""
    args = ["start", "--nodes", NODES] + ([] if shutil.which("slurmd") else ["--no-slurm"])
    p = cluster(*args)
    try:
        assert p.returncode == 0, p.stderr
        data = tmp_path_factory.mktemp("cluster")      # scratch; datasets on the volume
        shared = os.path.join(testbed, f"cluster-test-{os.getpid()}")
        os.makedirs(shared)
        yield {"mount": testbed, "data": shared, "tmp": data,
               "slurm": "--no-slurm" not in args}
    finally:
        p = cluster("stop")
        shutil.rmtree(os.path.join(testbed, f"cluster-test-{os.getpid()}"),
                      ignore_errors=True)
        assert p.returncode == 0, p.stderr
        nothing_left()


def env_of(up):
    e = dict(os.environ, PYTHONPATH=ROOT, UCX_TLS="tcp,self", UCX_NET_DEVICES="eth0",
             SLURM_CONF=f"{STATE}/slurm.conf",
             PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return e


def _launch(up, cmd, timeout):
    return once_more(lambda: (launch(cmd, timeout=timeout, env=env_of(up),
                                             cwd=up["tmp"]), ""))[0]


def mpi(up, n, args, timeout=300):
    """``cluster-local.sh mpiexec -n n python args`` (hydra, one proxy per node)."""
    return _launch(up, [SCRIPT, "mpiexec", "-n", str(n), sys.executable, *map(str, args)],
                   timeout)


def srun(up, n, args, timeout=300):
    """srun -N 4 -n n --mpi=pmi2 python args, or the mpiexec path without Slurm."""
    if not up["slurm"]:
        return mpi(up, n, args, timeout)
    return _launch(up, ["srun", "-N", str(NODES), "-n", str(n), "--mpi=pmi2",
                        "--kill-on-bad-exit=1", sys.executable, *map(str, args)], timeout)


def test_status_one_line_per_node(up):
    p = cluster("status")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == HOSTS
    assert all(" up " in ln and "mounted" in ln for ln in lines), p.stdout
    if up["slurm"]:
        assert all("idle" in ln for ln in lines), p.stdout


def test_each_node_has_its_own_hostname_and_page_cache(up):
    path = os.path.join(up["data"], "probe")
    with open(path, "wb") as f:
        f.write(os.urandom(8 << 20))
    probe = ("import socket, sys; sys.path.insert(0, %r); from hpcio.cache import "
             "resident_fraction as r; print(socket.gethostname(), r([%r]))" % (ROOT, path))
    p = cluster("exec", "hpcio-n1", "dd", f"if={path}", "of=/dev/null", "bs=1M")
    assert p.returncode == 0, p.stderr           # read through node 1's client only
    seen = {}
    for h in HOSTS:
        p = cluster("exec", h, sys.executable, "-c", probe)
        assert p.returncode == 0, p.stderr
        host, frac = p.stdout.split()
        seen[host] = float(frac)
    assert set(seen) == set(HOSTS)
    assert seen["hpcio-n1"] == 1.0 and all(seen[h] == 0.0 for h in HOSTS[1:]), seen


def test_mpiexec_node_communicator_across_nodes(up):
    code = ("from mpi4py import MPI; import socket; from hpcio.mpiutil import node_comm; "
            "c = MPI.COMM_WORLD; n = node_comm(c); "
            "rows = c.gather((c.rank, socket.gethostname(), n.size, n.rank, "
            "c.allreduce(c.rank))); c.rank or print(repr(rows), flush=True)")
    p = mpi(up, NODES * PPN, ["-c", code], timeout=120)
    assert p.returncode == 0, p.stderr
    total = sum(range(NODES * PPN))
    assert eval(p.stdout) == [(r, HOSTS[r // PPN], PPN, r % PPN, total)
                              for r in range(NODES * PPN)], p.stdout


def train(up, out, *extra):
    ds = make_dataset(up["data"], "packed", "raw", records=4000, shards=4, seed=3)
    p = srun(up, NODES * PPN, ["-m", "hpcio.train", "--data", ds.root, "--reader",
                               "coordinated", "--model", "emulate", "--compute-time", "0.005",
                               "--batch", "16", "--steps", "8", "--cache", "cold",
                               "--out", out, *extra], timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    with open(os.path.join(out, "env.json")) as f:
        env = json.load(f)
    return ds, env, p


def test_cold_on_every_node_and_node_ids_per_rank(up):
    out = str(up["tmp"] / "cold")
    ds, env, p = train(up, out)
    cache = env["cache"]
    assert cache["mode"] == "cold" and cache["cold_everywhere"] is True
    assert [n["host"] for n in cache["nodes"]] == HOSTS
    assert all(n["ranks"] == PPN and n["files"] == len(ds.paths) and n["resident"] < 0.05
               for n in cache["nodes"]), cache
    for r in range(NODES * PPN):
        with open(os.path.join(out, f"rank-{r}.json")) as f:
            rec = json.load(f)
        assert (rec["host"], rec["node"], rec["local_rank"]) == (HOSTS[r // PPN], r // PPN,
                                                                  r % PPN), rec
    assert "NOT cold" not in p.stdout + p.stderr
    # across nodes too collective="auto" reads independently
    for r in range(NODES * PPN):
        with open(os.path.join(out, f"rank-{r}.json")) as f:
            st = json.load(f)["reader_stats"]
        assert st["collective"] is False and st["collective_calls"] == 0 < st["calls"], st


def test_a_node_left_warm_says_so(up):
    ds = make_dataset(up["data"], "packed", "raw", records=4000, shards=4, seed=3)
    # a live mapping on node 3 keeps its pages resident whatever fadvise says
    hold = ("import mmap, sys, time\nms = []\n"
            f"for p in {ds.paths!r}:\n"
            "    f = open(p, 'rb'); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
            "    sum(m[i] for i in range(0, len(m), 4096)); ms.append(m)\n"
            "print('held', flush=True); time.sleep(300)")
    holder = spawn([SCRIPT, "exec", "hpcio-n3", sys.executable, "-c", hold],
                              stdout=PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline().strip() == "held"
        _, env, p = train(up, str(up["tmp"] / "warm"))
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    cache = env["cache"]
    assert cache["cold_everywhere"] is False and cache["warm_nodes"] == ["hpcio-n3"], cache
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if "NOT cold" in ln]
    assert lines and all("1 of 4 node(s): hpcio-n3 100%" in ln for ln in lines), lines


def _kill_node(k, name="hpcio.train"):
    """SIGKILL every ``name`` process of node ``k`` (the ones in its network namespace): the
    node's end, as its ranks see it."""
    with open(f"{STATE}/state") as f:
        state = dict(ln.rstrip("\n").split("=", 1) for ln in f if "=" in ln)
    ns = os.readlink(f"/proc/{state[f'HOLDER{k}']}/ns/net")
    killed = 0
    for pid in launch(["pgrep", "-f", name]).stdout.split():
        try:
            if os.readlink(f"/proc/{pid}/ns/net") == ns:
                os.kill(int(pid), 9)
                killed += 1
        except OSError:
            continue
    return killed


def test_a_node_that_dies_mid_run(up):
    """Node 3's ranks killed mid-run: the job ends (no hang), a line names hpcio-n3, and
    every other rank's steps are on disk."""
    if not up["slurm"]:
        pytest.skip("no slurm-wlm here (apt-get install slurm-wlm)")
    ds = make_dataset(up["data"], "packed", "raw", records=4000, shards=4, seed=3)
    out = up["tmp"] / "dies"
    proc = spawn(["srun", "-N", str(NODES), "-n", str(NODES * PPN), "--mpi=pmi2",
                             "--kill-on-bad-exit=1", sys.executable, "-m", "hpcio.train",
                             "--data", ds.root, "--model", "emulate", "--compute-time", "0.02",
                             "--batch", "16", "--epochs", "100", "--flush-interval", "1",
                             "--out", out], stdout=PIPE, stderr=PIPE,
                            text=True, env=env_of(up), cwd=up["tmp"])
    try:
        deadline = time.monotonic() + 240
        while not all((out / f"rank-{r}.json").exists() for r in range(NODES * PPN)):
            assert proc.poll() is None and time.monotonic() < deadline, proc.poll()
            time.sleep(0.5)
        assert _kill_node(3) == PPN
        t = time.monotonic()
        _, err = proc.communicate(timeout=120)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode != 0 and took < 60, (proc.returncode, took)
    # one line for the job: the first rank to lose its peer says it, the others only end
    line = one_line(subprocess.CompletedProcess(proc.args, proc.returncode, "", err),
                    "hpcio.train", alone=False, raw=True)
    assert "lost its connection to hpcio-n3" in line, err
    for r in range(NODES * PPN):
        if r // PPN == 2:
            continue
        with open(out / f"rank-{r}.json") as f:
            rec = json.load(f)
        assert rec["partial"] is True and rec["steps_flushed"] > 0, (r, rec["steps_flushed"])
    assert not launch(["pgrep", "-f", f"hpcio.train.*{out}"], text=False).stdout


def test_darshan_across_nodes(up):
    """A Darshan-traced run at 4 nodes x 2 ranks, independent reads (the default): the log
    has every rank, its MPI-IO bytes per rank are what each rank's reader read, and so are
    its POSIX bytes; the DXT reads are aligned to each rank's steps by its own MPI_Init
    stamp; the node clocks' measured offsets are recorded. The same run with collective reads: the
    POSIX reads are one aggregator's per node (ROMIO's collective buffering), and with a
    globally shuffled plan they read the holes too, many times the bytes wanted."""
    lib = os.environ.get("HPCIO_DARSHAN") or os.path.join(ROOT, ".darshan", "lib",
                                                          "libdarshan.so")
    if not os.path.exists(lib):
        pytest.skip(f"no Darshan runtime at {lib} (scripts/darshan-local.sh build)")
    from hpcio.explain.runs import load_run
    from hpcio.explain.tables import dxt_shifts, exposure
    from hpcio.measure import darshanlog
    out = str(up["tmp"] / "traced")
    train(up, out, "--darshan", lib, "--darshan-dxt")
    run = load_run(out)
    assert len(run.logs) == 1
    log = run.logs[0]
    assert log.nprocs == NODES * PPN
    s = darshanlog.log_summary(glob.glob(os.path.join(out, "darshan", "*.darshan"))[0])
    assert s["partial"] == []
    read = {r: i["reader_stats"]["read_bytes"] for r, i in enumerate(run.rank_info)}
    assert s["bytes_read"]["MPI-IO"] == read
    posix = s["bytes_read"]["POSIX"]
    assert sorted(posix) == sorted(read), s["bytes_read"]
    for r, b in posix.items():  # rank 0 also reads the index
        assert read[r] <= b <= read[r] + (1 << 20), s["bytes_read"]
    stamps = [i["mpi_init_unix"] for i in run.rank_info]
    assert max(stamps) - min(stamps) < 30
    shifts = dxt_shifts(run, log)
    assert list(shifts - log.start) == pytest.approx([x - min(stamps) for x in stamps])
    e, o, outside = exposure(run, log)
    assert e.shape == (NODES * PPN, 8) and e.sum() + o.sum() > 0
    for i in run.rank_info:
        c = i["clock"]
        assert abs(c["offset_s"]) <= c["rtt_s"] / 2 + 1e-4 and c["rtt_s"] < 0.05, c
    out = str(up["tmp"] / "collective")
    train(up, out, "--darshan", lib, "--reader-option", "collective=true")
    s = darshanlog.log_summary(glob.glob(os.path.join(out, "darshan", "*.darshan"))[0])
    posix = {r: b for r, b in s["bytes_read"]["POSIX"].items() if b > 1 << 16}
    assert sorted(posix) == [k * PPN for k in range(NODES)], s["bytes_read"]["POSIX"]
    assert sum(posix.values()) > 4 * sum(s["bytes_read"]["MPI-IO"].values()), s


def test_node_shared_reader_exactly_once_same_bytes_as_one_node(up):
    """check_readers.py (exactly-once, bytes against the source, same sequence on every
    reader) at 4 nodes x 2 ranks, with the node-shared coordinated reader and one reading
    collectively only where the pieces are small (every rank must join the same collective
    calls); its digests equal those of the same 8 ranks on one node."""
    data = [make_dataset(up["data"], f, e, records=n, shards=2, seed=1).root
            for f, e, n in (("packed", "raw", 61), ("lmdb", "raw", 61), ("hdf5", "png", 53))]
    args = [CHECK, "--data", *data, "--readers",
            "naive,coordinated,coordinated:shared=true,coordinated:shared=false,"
            "coordinated:collective=small",
            "--batch", "3", "--shuffles", "global", "--epochs", "2"]
    across = srun(up, NODES * PPN, args, timeout=400)
    assert across.returncode == 0, across.stdout + across.stderr
    assert re.search(r"^OK \d+ checks$", across.stdout, flags=re.M), across.stdout
    one = launch([os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n",
                          str(NODES * PPN), sys.executable, *args], timeout=400, env=dict(os.environ, PYTHONPATH=ROOT))
    assert one.returncode == 0, one.stdout + one.stderr
    dig = lambda s: sorted(re.findall(r"^DIGEST .*$", s, flags=re.M))  # noqa: E731
    assert dig(across.stdout) and dig(across.stdout) == dig(one.stdout)


@pytest.mark.parametrize("writer", ["coordinated", "dcp"])
def test_checkpoints_across_nodes_restored_by_another_node(up, writer):
    """llama3_8b's layout (8 ranks: 4 nodes x 2), scaled down, written to the GlusterFS
    volume and restored with --rank-shift (each rank reads what a rank of another node
    wrote), every tensor checked against the CRC-32C its writer recorded."""
    out, d = up["tmp"] / f"ckpt-{writer}", os.path.join(up["data"], f"ckpt-{writer}")
    p = srun(up, NODES * PPN, ["-m", "hpcio.checkpoint", "run", "--model", "llama3_8b",
                               "--scale", "0.0002", "--writer", writer, "--dir", d,
                               "--out", out, "--checkpoints", "2", "--rank-shift"])
    assert p.returncode == 0, p.stdout + p.stderr
    s = json.loads((out / "summary.json").read_text())
    assert (s["complete"], s["nodes"], s["ranks"], s["rank_shift"]) == (True, NODES,
                                                                       NODES * PPN, PPN), s
    assert len(s["checkpoints"]) == 2 and all(c["read_GiB_per_s"] > 0 and
                                              c["write_GiB_per_s"] > 0
                                              for c in s["checkpoints"]), s["checkpoints"]
    assert sorted(n["host"] for n in s["cache"]["nodes"]) == HOSTS, s["cache"]
    steps = sorted(os.listdir(d))
    assert steps == ["global_epoch1_step1", "global_epoch1_step2"], steps
    assert all(os.path.exists(os.path.join(d, k, "complete")) for k in steps)


def sbatch(up, job, *args, timeout=600):
    e = dict(env_of(up), HPCIO_VENV=os.path.dirname(os.path.dirname(sys.executable)))

    def submit():
        p = launch(["sbatch", "--wait", "-N", str(NODES), f"--ntasks-per-node={PPN}",
                            "--time=8", "--parsable", os.path.join(ROOT, "jobs", job),
                            *map(str, args)],
                           timeout=timeout, env=e,
                           cwd=up["tmp"])
        jobid = p.stdout.strip().split(";")[0]
        p.jobid = jobid
        return p, "".join(Path(f).read_text()
                          for f in glob.glob(str(up["tmp"] / f"*-{jobid}.out")))
    p, log = once_more(submit)
    assert p.returncode == 0, p.stderr + log
    return p.jobid, log


def test_job_templates_on_four_nodes(up):
    if not up["slurm"]:
        pytest.skip("no slurm-wlm here (apt-get install slurm-wlm)")
    ds = make_dataset(up["data"], "packed", "raw", records=2000, shards=4, seed=4)
    jobid, log = sbatch(up, "train.sbatch", "--data", ds.root, "--model", "emulate",
                        "--compute-time", "0.005", "--batch", "16", "--steps", "5",
                        "--out", up["tmp"] / "job-train")
    with open(up["tmp"] / "job-train" / "env.json") as f:
        assert sorted(set(json.load(f)["hosts"])) == HOSTS
    jobid, log = sbatch(up, "scaling.sbatch", "--data", ds.root, "--", "--model", "emulate",
                        "--compute-time", "0.005", "--batch", "16", "--steps", "5")
    with open(up["tmp"] / "runs" / f"scaling-{jobid}" / "sweep.json") as f:
        sweep = json.load(f)
    assert "8 of 8 runs done, 0 failed" in log, log
    runs = sorted(glob.glob(str(up["tmp"] / "runs" / f"scaling-{jobid}" / "runs" / "*")))
    assert len(runs) == 8, runs                 # naive, coordinated x 1, 2, 4, 8 ranks
    with open(os.path.join([r for r in runs if r.endswith("coordinated-n8-r0")][0],
                           "env.json")) as f:
        assert sorted(set(json.load(f)["hosts"])) == HOSTS
    assert sweep
