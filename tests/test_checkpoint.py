"""hpcio.checkpoint: DLIO's sizes and files of the llama3 layouts, the coordinated plan, byte
exact round trips of every writer (1 rank in-process, 2 ranks in one launch; 4 ranks on
GlusterFS in tests/test_pfs.py), and the bad input a restore must refuse in one line."""

import ctypes
import json
import os

import numpy as np
import pytest

from hpcio.checkpoint.layout import GIB, MODELS, Layout, load_model
from hpcio.checkpoint.writers import WRITERS, plan
from hpcio.errors import HpcioError

from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
CHECK = os.path.join(HERE, "mpi", "check_checkpoint.py")
# a few MiB per checkpoint: llama3_8b's 195 + 6 tensors per rank, each 1/20,000 of its size
TINY = ["--model", "llama3_8b", "--scale", "0.00005", "--checkpoints", "1"]


def _json(path):
    with open(path) as f:
        return json.load(f)


# ---- sizes and layout: DLIO's formulas --------------------------------------------------
def test_sizes_are_the_rules_table():
    """MLPerf Storage's Table 2 (105 GB, 912 GB; DLIO's GB are GiB) and the v3.0 results'
    checkpoint_size_GB (70b 911.2, 1t 15,426.6) from the models' shapes."""
    assert load_model("llama3_8b").num_parameters() == 8_030_261_248
    b8 = Layout(load_model("llama3_8b"), 8).total_bytes / GIB
    b70 = Layout(load_model("llama3_70b"), 64).total_bytes / GIB
    b1t = Layout(load_model("llama3_1t"), 1024).total_bytes / GIB
    assert round(b8) == 105 and round(b70, 1) == 911.2 and round(b1t, 1) == 15426.6
    # DLIO's DP is the world over TP x PP: 8b on 4 ranks is the same checkpoint, by 4
    assert abs(Layout(load_model("llama3_8b"), 4).total_bytes / GIB - b8) < 0.01
    assert set(MODELS) == {"llama3_8b", "llama3_70b", "llama3_405b", "llama3_1t"}


def test_sizes_command_lists_the_layouts():
    p = run_main(["-m", "hpcio.checkpoint", "sizes"])
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["llama3_8b", "llama3_70b", "llama3_405b",
                                            "llama3_1t"]
    assert rows[1].split()[-2] == "911.212" and "TP8 x PP64 x DP2, ZeRO-1, 1024" in rows[3]


def test_files_as_dlio_names_them():
    lay = Layout(load_model("llama3_8b"), 8)
    assert [f.name for f in lay.files(3)] == ["zero_pp_rank_3_mp_rank_0_model_states",
                                              "zero_pp_rank_3_mp_rank_0_optim_states"]
    assert len(lay.files(3)[0].tensors) == 1 + 32 * 6 + 2 and len(lay.files(3)[1].tensors) == 6
    big = Layout(load_model("llama3_405b"), 512)  # ZeRO-1, PP 32: layer files on DP rank 0
    names = [f.name for f in big.files(0)]
    assert names[0] == "layer_0-model_0_model_states" and names[-1].endswith("_optim_states")
    last = big.files(255)  # last pipeline stage ends with lm_head and the final norm
    assert [f.name for f in last][-3:-1] == ["layer_127-model_255_model_states",
                                             "layer_128-model_255_model_states"]
    assert [f.name for f in big.files(256)] == ["zero_pp_rank_1_mp_rank_0_optim_states"]


def test_scale_keeps_files_and_tensors():
    full, small = (Layout(load_model("llama3_8b"), 4, s) for s in (1.0, 0.01))
    for r in range(4):
        a, b = full.files(r), small.files(r)
        assert [f.name for f in a] == [f.name for f in b]
        assert [len(f.tensors) for f in a] == [len(f.tensors) for f in b]
    assert abs(small.total_bytes / full.total_bytes - 0.01) < 1e-4


@pytest.mark.parametrize("bad, words", [
    (lambda: Layout(load_model("llama3_70b"), 4), "multiple of TP x PP = 8 x 1 = 8"),
    (lambda: Layout(load_model("llama3_8b"), 1, 2.0), "--scale 2"),
    (lambda: load_model("llama3_9b"), "unknown --model 'llama3_9b'"),
])
def test_layout_refuses(bad, words):
    with pytest.raises(HpcioError, match=words.replace("+", r"\+")):
        bad()


def test_plan_regions_aligned_and_disjoint():
    lay = Layout(load_model("llama3_8b"), 6, 0.001)
    p = plan(lay, nfiles=2, align=1 << 20)
    spans = {}
    for r, (g, start, entries) in p.regions.items():
        assert start % (1 << 20) == 0 and g == r * 2 // 6
        assert entries[0][1] == start and sum(e[2] for e in entries) == lay.rank_bytes(r)
        spans.setdefault(g, []).append((start, entries[-1][1] + entries[-1][2]))
    for g, s in spans.items():
        s.sort()
        assert all(a[1] <= b[0] for a, b in zip(s, s[1:])) and p.sizes[g] == s[-1][1]


# ---- round trips, one rank in-process ---------------------------------------------------
def _run(tmp_path, writer, *more, env=None, name="ck"):
    return run_main(["-m", "hpcio.checkpoint", "run", *TINY, "--writer", writer,
                     "--dir", tmp_path / name, "--out", tmp_path / f"run-{name}-{writer}",
                     *more], env=env)


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_round_trip_one_rank(tmp_path, writer):
    """Written, cache cleared, read back and every tensor's CRC-32C matched (the run
    fails otherwise); the summary's figures are MLPerf's mean of the per-checkpoint rates."""
    p = _run(tmp_path, writer, "--checkpoints", "2")
    assert p.returncode == 0, p.stderr
    s = _json(tmp_path / f"run-ck-{writer}" / "summary.json")
    rates = [c["write_GiB_per_s"] for c in s["checkpoints"]]
    assert len(rates) == 2 and s["metric"]["save_checkpoint_io_mean_GB_per_second"] == \
        pytest.approx(sum(rates) / 2)
    assert all(c["read_s"] > 0 and c["read_s"] == max(c["read_rank_s"]) for c in s["checkpoints"])
    assert s["cache"]["mode"] == "cold" and s["cache"]["nodes"][0]["resident_after"] < 0.05
    ck = tmp_path / "ck" / "global_epoch1_step2"
    assert (ck / "complete").exists() and (ck / "manifest.json").exists()


def test_coordinated_manifest_reads_without_hpcio(tmp_path):
    """A tensor read back with NumPy from the manifest alone equals the rank's state."""
    import crc32c
    from hpcio.checkpoint.state import make_state
    assert _run(tmp_path, "coordinated").returncode == 0
    ck = tmp_path / "ck" / "global_epoch1_step1"
    m = _json(ck / "manifest.json")
    state = make_state(Layout(load_model("llama3_8b"), 1, 0.00005).files(0), 0, 0)
    for t in m["tensors"][::40]:
        raw = np.fromfile(ck / t["data_file"], dtype=np.uint8, count=t["length"],
                          offset=t["offset"])
        assert crc32c.crc32c(raw) == t["crc32c"]
        assert raw.tobytes() == state[t["key"]].view(-1).numpy().tobytes()
    assert all(f["bytes"] == os.path.getsize(ck / f["name"]) for f in m["files"])


# ---- bad input --------------------------------------------------------------------------
def _one_line(p):
    assert p.returncode == 2, p.stderr
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("hpcio.checkpoint: error: "), p.stderr
    return lines[0]


def test_existing_dir_refused_unless_force(tmp_path):
    assert _run(tmp_path, "torch_save").returncode == 0
    line = _one_line(_run(tmp_path, "torch_save", name="ck"))
    assert "exists and is not empty" in line and "--force" in line
    assert _run(tmp_path, "coordinated", "--force", "--checkpoints", "1").returncode == 0


def test_restore_of_another_layout_names_both(tmp_path):
    assert _run(tmp_path, "coordinated", "--phase", "write").returncode == 0
    p = run_main(["-m", "hpcio.checkpoint", "run", "--model", "llama3_8b", "--scale",
                  "0.0001", "--phase", "read", "--dir", tmp_path / "ck", "--out",
                  tmp_path / "read"])
    line = _one_line(p)
    assert "written as llama3_8b TP1 x PP1 x DP1 ZeRO-3, 1 ranks, scale 5e-05, writer " \
           "coordinated; this job is llama3_8b TP1 x PP1 x DP1 ZeRO-3, 1 ranks, scale " \
           "0.0001" in line and "differs in scale" in line
    line = _one_line(run_main(["-m", "hpcio.checkpoint", "run", *TINY, "--writer", "dcp",
                               "--phase", "read", "--dir", tmp_path / "ck", "--out",
                               tmp_path / "read2"]))
    assert "writer coordinated; this job is" in line and "differs in writer" in line


def test_restore_on_another_world_size_names_both():
    """A checkpoint of 4 ranks restored by 2: refused, both layouts in the line."""
    from hpcio.checkpoint.run import check_compatible
    written = {"writer": "dcp", "layout": Layout(load_model("llama3_8b"), 4, 0.01).record()}
    with pytest.raises(HpcioError) as e:
        check_compatible(written, Layout(load_model("llama3_8b"), 2, 0.01), "dcp", "CK")
    assert str(e.value) == (
        "CK: written as llama3_8b TP1 x PP1 x DP4 ZeRO-3, 4 ranks, scale 0.01, writer dcp; "
        "this job is llama3_8b TP1 x PP1 x DP2 ZeRO-3, 2 ranks, scale 0.01, writer dcp "
        "(differs in world, dp)")


@pytest.mark.parametrize("how", ["truncate", "edit"])
def test_changed_shard_names_file_and_offset(tmp_path, how):
    assert _run(tmp_path, "coordinated", "--phase", "write").returncode == 0
    ck = tmp_path / "ck" / "global_epoch1_step1"
    m = _json(ck / "manifest.json")
    t = max(m["tensors"], key=lambda t: t["length"])
    data = ck / t["data_file"]
    if how == "truncate":
        os.truncate(data, t["offset"] + 10)
    else:
        with open(data, "r+b") as f:
            f.seek(t["offset"] + 3)
            f.write(b"\x5a\xa5")
    line = _one_line(run_main(["-m", "hpcio.checkpoint", "run", *TINY, "--phase", "read",
                               "--dir", tmp_path / "ck", "--out", tmp_path / "read"]))
    if how == "truncate":
        assert f"{data}: {t['offset'] + 10} bytes, the manifest says {m['files'][0]['bytes']}: " \
               f"truncated at offset {t['offset'] + 10}" in line
    else:
        assert f"{data} offset {t['offset']} ({t['length']} bytes): tensor {t['key']} of " \
               f"rank 0 has CRC-32C" in line and "not restored" in line


def test_torch_save_truncated_file_named(tmp_path):
    assert _run(tmp_path, "torch_save", "--phase", "write").returncode == 0
    f = tmp_path / "ck" / "global_epoch1_step1" / "zero_pp_rank_0_mp_rank_0_optim_states.pt"
    os.truncate(f, os.path.getsize(f) // 2)
    line = _one_line(run_main(["-m", "hpcio.checkpoint", "run", *TINY, "--writer",
                               "torch_save", "--phase", "read", "--dir", tmp_path / "ck",
                               "--out", tmp_path / "read"]))
    assert f"{f}: torch.load failed" in line


def test_rank_failing_mid_write_leaves_no_complete_checkpoint(tmp_path):
    """The second checkpoint's write fails on rank 0 half way: the first stays complete,
    the second has no manifest and no 'complete', and a restore refuses it in one line."""
    p = _run(tmp_path, "coordinated", "--checkpoints", "2", env={"HPCIO_CKPT_FAULT": "0:2"})
    assert p.returncode != 0 and "checkpoint 2 not written: HPCIO_CKPT_FAULT test hook: " \
        "rank 0 failed while writing checkpoint 2 (RuntimeError); it has no 'complete' " \
        "marker" in _one_line(p)
    ck = tmp_path / "ck"
    assert (ck / "global_epoch1_step1" / "complete").exists()
    assert not (ck / "global_epoch1_step2" / "complete").exists()
    assert not (ck / "global_epoch1_step2" / "manifest.json").exists()
    line = _one_line(run_main(["-m", "hpcio.checkpoint", "run", *TINY, "--phase", "read",
                               "--checkpoints", "2", "--dir", ck, "--out", tmp_path / "read"]))
    assert "global_epoch1_step2: incomplete checkpoint (no 'complete' marker" in line


# ---- two ranks, one launch ----------------------------------------------------------------
def test_round_trip_two_ranks(tmp_path):
    """Every writer at 2 ranks: write, restore (also shifted by one rank), each restored
    tensor equal to the original's bytes; the coordinated files' size is the plan's."""
    p = run_mpi(2, [CHECK, tmp_path], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(ln for ln in p.stdout.splitlines() if ln.startswith("OK")) == \
        [f"OK {w}" for w in sorted(WRITERS)], p.stdout


@pytest.fixture
def small_fs(tmp_path):
    """An 8 MiB tmpfs: room for one tiny checkpoint (5.4 MiB), not two (root only)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    d = tmp_path / "small"
    d.mkdir()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", bytes(d), b"tmpfs", 0, b"size=8M"):
        pytest.skip(f"cannot mount a tmpfs here ({os.strerror(ctypes.get_errno())})")
    try:
        yield d
    finally:
        libc.umount2(bytes(d), 2)  # MNT_DETACH


@pytest.mark.hostile
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_full_disk_is_one_line_and_leaves_the_earlier_checkpoint(tmp_path, small_fs, writer):
    p = run_main(["-m", "hpcio.checkpoint", "run", *TINY, "--writer", writer, "--checkpoints",
                  "2", "--dir", small_fs / "ck", "--out", tmp_path / "run"])
    line = one_line(p, "hpcio.checkpoint")
    assert p.returncode != 0 and "checkpoint 2 not written" in line and "full" in line, line
    assert (small_fs / "ck" / "global_epoch1_step1" / "complete").exists()
    assert not (small_fs / "ck" / "global_epoch1_step2" / "complete").exists()
