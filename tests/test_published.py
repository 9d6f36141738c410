"""hpcio.simulate published: the published systems' platform files carry a source for every
value and parse, the published table reads, and the table command predicts one system."""

import glob
import os

import pytest

from hpcio.errors import HpcioError
from hpcio.simulate import published as pub
from hpcio.simulate.__main__ import main
from hpcio.simulate.engine import INSTALL_HINT, available

needs_simgrid = pytest.mark.skipif(not available()[0], reason=INSTALL_HINT)

GOOD = """name: x            # a name
published:
  description: closed/X/systems/x.yaml  # the description itself
compute:
  nodes: 2            # S clients quantity
  ranks_per_node: 1   # R
  cores: 8            # R host_cpu_count
  nic_mbs: 1000       # S networking
  nic_latency_us: 25  # A
storage:
  servers: 1          # S
  bandwidth_mbs: 2000 # S
  latency_us: 200     # A
client_cache_mib: off # R
"""


def test_a_value_without_its_source_is_named(tmp_path):
    pub.check_sources("ok.yaml", GOOD)
    bad = GOOD.replace("nic_mbs: 1000       # S networking", "nic_mbs: 1000")
    with pytest.raises(HpcioError, match=r"bad\.yaml: compute\.nic_mbs has no source"):
        pub.check_sources("bad.yaml", bad)
    f = tmp_path / "bad.yaml"
    f.write_text(bad)
    with pytest.raises(HpcioError, match="compute.nic_mbs has no source"):
        pub.load_described(str(f))
    f.write_text(GOOD.replace("published:\n  description: closed/X/systems/x.yaml  # the "
                              "description itself\n", ""))
    with pytest.raises(HpcioError, match="no published section"):
        pub.load_described(str(f))


def test_every_published_file_parses_and_every_row_has_its_platform():
    files = sorted(glob.glob(os.path.join(pub.DATA, "*.yaml")))
    assert len(files) >= 10
    for path in files:
        platform, meta = pub.load_described(path)
        assert platform.nodes >= 1 and platform.server_bps > 0 and meta["description"]
    rows = pub.load_table()
    assert len({r["system"] for r in rows}) >= 10
    assert {os.path.basename(p) for p in files} >= {r["platform"] for r in rows}
    assert all(r["summary"].endswith("summary.json") for r in rows)
    cpu = pub.load_cpu()
    assert set(cpu) == {w.name for w in pub.WORKLOADS.values()}
    assert all(c.per_sample > 0 and c.read_per_byte > 0 for c in cpu.values())


def test_a_bad_row_is_one_line(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text(",".join(pub.COLUMNS) + "\nx,o,resnet50,b200,1,1,90,1,p.yaml,s,d\n")
    with pytest.raises(HpcioError, match=r"t\.csv:2: no DLIO config for resnet50"):
        pub.load_table(str(f))


@needs_simgrid
def test_the_table_command_on_one_system(tmp_path, capsys):
    out = tmp_path / "p.csv"
    assert main(["published", "--only", "rigA_c5n18xl", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    assert "rigA_c5n18xl" in text and "systems within 15%" in text
    head, row = out.read_text().splitlines()
    got = dict(zip(head.split(","), row.split(",")))
    assert int(got["published_accelerators"]) == 1 and got["limit"]
    assert int(got["predicted_accelerators"]) >= 0
