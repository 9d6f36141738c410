"""The emulated step's end: the barrier by default, an opt-in allreduce's size, its time on a
declared fabric or its measured transport, the options and their refusals; its timing
under mpiexec is in tests/test_train.py."""

import subprocess
import sys

import pytest

from common.inproc import run_main
from hpcio.errors import HpcioError
from hpcio.train.dist import World
from hpcio.train.exchange import (EXCHANGE_MODELS, MODES, TRANSPORTS, FabricExchange,
                                  NoExchange, check_fits, exchange_plan, exchange_size,
                                  make_exchange, ring_allreduce_s)
from hpcio.train.models import MODELS
from hpcio.train.options import build_parser, parse_args

LENET = 4 * 431_080
FABRIC = {"bandwidth_bytes_per_s": 1e9, "latency_s": 1e-5}


def test_size_is_the_models_float32_gradients():
    n, what = exchange_size("resnet50", None)
    assert n == 4 * 25_557_032 and "resnet50" in what
    assert exchange_size(None, 1000)[0] == 1000
    assert exchange_size(None, 0)[0] == 0  # a barrier only
    none, what = exchange_size("none", None)
    assert none is None and "independently" in what


def test_default_is_the_barrier_alone_whatever_the_data():
    """DLIO's step: compute, then a zero-byte barrier; no size comes from the data."""
    assert exchange_size(None, None) == (0, "no gradients")
    plan = exchange_plan(None, None, "gloo", None, ranks=4, nodes=2)
    assert plan["mode"] == "barrier" and plan["bytes"] == 0 and plan["fabric"] is None
    assert plan["what"].startswith("barrier only: a zero-byte barrier over gloo every step")
    assert parse_args(["--data", "x", "--model", "emulate"]).exchange_model is None
    helptext = " ".join(build_parser().format_help().split())
    assert "Default: no gradients, the barrier only (DLIO's step" in helptext


def test_ring_allreduce_time():
    # 2(P-1)/P x bytes / bandwidth + 2(P-1) x latency
    assert ring_allreduce_s(2, 4_000_000, 1e9, 1e-5) == pytest.approx(0.004 + 2e-5)
    assert ring_allreduce_s(8, 1e8, 25e9, 2e-6) == pytest.approx(1.75 * 4e-3 + 14 * 2e-6)
    assert ring_allreduce_s(1, 1e8, 1e9, 1.0) == 0.0


@pytest.mark.parametrize("model, nbytes, fabric, ranks, nodes, mode, says", [
    ("lenet", None, FABRIC, 2, 1, "fabric",
     f"{LENET:,} bytes: lenet's gradients (--exchange-model), emulated on fabric 1 GB/s, "
     f"10 us: a ring allreduce of 1.744 ms per step at 2 ranks (a sleep after the barrier "
     f"over gloo)"),
    (None, 4_000_000, None, 2, 1, "measured",
     "4,000,000 bytes (--exchange-bytes), measured via gloo (all ranks on one node: "
     "loopback through the host's memory, not a network; --exchange-fabric emulates one)"),
    (None, 4_000_000, None, 4, 2, "measured", "4,000,000 bytes (--exchange-bytes), "
                                              "measured via gloo"),
    (None, 0, None, 2, 1, "barrier", "barrier only (--exchange-bytes 0): a zero-byte"),
    ("none", None, None, 2, 1, "none", "none (--exchange-model none): ranks step "
                                       "independently"),
    ("lenet", None, FABRIC, 1, 1, "none", "none: one rank"),
])
def test_the_plan_says_which_end_and_its_sizes(model, nbytes, fabric, ranks, nodes, mode,
                                               says):
    plan = exchange_plan(model, nbytes, "gloo", fabric, ranks, nodes)
    assert plan["mode"] == mode and mode in MODES
    assert plan["what"] == says or plan["what"].startswith(says)
    if mode == "fabric":
        assert plan["bytes"] == LENET and plan["via"] == "gloo"
        assert plan["fabric"] == dict(FABRIC, allreduce_s=pytest.approx(
            LENET / 1e9 + 2e-5))
    if mode == "none":
        assert plan["bytes"] is None


def test_an_emulated_allreduce_too_long_to_sleep_is_one_line():
    with pytest.raises(HpcioError) as e:
        exchange_plan(None, 10 ** 18, "gloo", {"bandwidth_bytes_per_s": 1.0,
                                               "latency_s": 0.0}, 2)
    assert "would take" in str(e.value) and "\n" not in str(e.value)


class _Barrier(NoExchange):
    def __init__(self):
        self.closed = False

    def __call__(self, arrived):
        return arrived + 0.5, arrived + 0.5

    def close(self):
        self.closed = True


def test_the_fabric_sleeps_after_the_barrier():
    b = _Barrier()
    x = FabricExchange(b, 0.02)
    import time
    t3 = time.perf_counter()
    t4, t5 = x(t3)
    assert t4 == t3 + 0.5  # the barrier's end: the straggler wait stays apart
    assert time.perf_counter() - t3 >= 0.02
    x.close()
    assert b.closed


def test_no_exchange_costs_nothing():
    assert NoExchange()(12.5) == (12.5, 12.5)
    two, one = World(None, 0, 2, 0, 2, 1, 0, "h"), World(None, 0, 1, 0, 1, 1, 0, "h")
    assert make_exchange(exchange_plan("none", None, "gloo", None, 2), two).name == "none"
    assert make_exchange(exchange_plan(None, 1 << 20, "gloo", None, 1), one).name == "none"
    assert make_exchange(exchange_plan(None, None, "gloo", None, 2), one).name == "none"
    ddp = {"mode": "inside compute", "bytes": None, "via": "torch", "fabric": None}
    assert make_exchange(ddp, two).name == "none"  # a real model's: inside its compute


def test_a_size_that_does_not_fit_is_refused_on_every_rank():
    world = World(None, 0, 2, 0, 2, 1, 0, "node7")
    with pytest.raises(HpcioError) as e:
        check_fits(1 << 60, world)
    assert e.value.everywhere and "node7" in str(e.value)
    assert "\n" not in str(e.value) and "are available" in str(e.value)
    check_fits(1 << 20, world)
    check_fits(None, world)


@pytest.mark.parametrize("args, says", [
    (["--exchange-model", "lenet", "--exchange-bytes", "8"], "not both"),
    (["--model", "lenet", "--exchange-model", "lenet"], "for emulate"),
    (["--model", "lenet", "--exchange-bytes", "0"], "for emulate"),
    (["--model", "lenet", "--exchange-bytes", "8", "--exchange-fabric", "1GB/s"],
     "for emulate"),
    (["--exchange-fabric", "25GB/s,2us"], "--exchange-fabric needs an exchange size"),
    (["--exchange-fabric", "25GB/s", "--exchange-model", "none"],
     "(--exchange-model none exchanges nothing)"),
])
def test_bad_combinations_are_one_line(args, says):
    with pytest.raises(HpcioError) as e:
        parse_args(["--data", "x", "--model", "emulate"] + args)
    assert says in str(e.value) and e.value.everywhere and "\n" not in str(e.value)


@pytest.mark.parametrize("text, bandwidth, latency", [
    ("25GB/s,2us", 25e9, 2e-6), ("100Gbit/s", 12.5e9, 0.0), ("100Gb/s,0", 12.5e9, 0.0),
    ("1GB/s,10us", 1e9, 1e-5), ("2GiB/s, 1.5ms", 2 * 2 ** 30, 1.5e-3), ("3e9,2e-6", 3e9, 2e-6),
    ("800 MB/s, 5 \u00b5s", 8e8, 5e-6), ("400kbps,1ns", 5e4, 1e-9),
])
def test_fabric_units(text, bandwidth, latency):
    a = parse_args(["--data", "x", "--model", "emulate", "--exchange-bytes", "8",
                    "--exchange-fabric", text])
    assert a.exchange_fabric == {"bandwidth_bytes_per_s": pytest.approx(bandwidth),
                                 "latency_s": pytest.approx(latency)}


@pytest.mark.parametrize("text, says", [
    ("0", "bandwidth '0' must be > 0"),
    ("0GB/s,2us", "bandwidth '0GB/s' must be > 0"),
    ("-25GB/s", "bandwidth '-25GB/s' must be > 0"),
    ("fast", "'fast' is not a bandwidth"),
    ("nan", "'nan' is not a bandwidth"),
    ("1e999", "bandwidth '1e999' is not finite"),
    ("25GB", "unknown bandwidth unit 'GB'"),
    ("25gb/s", "unknown bandwidth unit 'gb/s'"),
    ("25GB/s,-2us", "latency '-2us' must be between 0 and"),
    ("25GB/s,soon", "'soon' is not a latency"),
    ("25GB/s,2 weeks", "unknown latency unit 'weeks'"),
    ("25GB/s,", "is not BANDWIDTH[,LATENCY]"),
    ("25GB/s,2us,3", "is not BANDWIDTH[,LATENCY]"),
])
def test_a_bad_fabric_is_one_line_naming_the_option(text, says):
    # --opt=VALUE: a value starting with '-' is not taken for an option
    p = run_main(["-m", "hpcio.train", "--data", "x", "--model", "emulate",
                  "--exchange-bytes", "8", f"--exchange-fabric={text}"])
    lines = p.stderr.splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr
    assert lines[0].startswith("hpcio.train: error: argument --exchange-fabric: ")
    assert says in lines[0], lines[0]


def test_fabric_from_a_config_file(tmp_path):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("model: emulate\nexchange-model: resnet50\nexchange-fabric: 25GB/s,2us\n")
    a = parse_args(["--config", str(cfg), "--data", "x"])
    assert a.exchange_fabric == {"bandwidth_bytes_per_s": 25e9, "latency_s": 2e-6}
    cfg.write_text("model: emulate\nexchange-bytes: 8\nexchange-fabric: 0\n")
    with pytest.raises(HpcioError) as e:
        parse_args(["--config", str(cfg), "--data", "x"])
    assert "exchange_fabric: bandwidth '0' must be > 0" in str(e.value)


def test_auto_transport_is_tcp_unless_bytes_move():
    """The barrier and a fabric's sleep move no bytes: plain sockets, no torch; a measured
    allreduce goes over gloo; tcp asked for an allreduce is one line."""
    assert exchange_plan(None, None, "auto", None, 2)["via"] == "tcp"
    assert exchange_plan("lenet", None, "auto", FABRIC, 2)["via"] == "tcp"
    assert exchange_plan(None, 4_000_000, "auto", None, 2)["via"] == "gloo"
    assert parse_args(["--data", "x", "--model", "emulate"]).exchange_via == "auto"
    with pytest.raises(HpcioError) as e:
        exchange_plan(None, 8, "tcp", None, 2)
    assert "barrier only" in str(e.value) and e.value.everywhere
    assert "\n" not in str(e.value)


@pytest.mark.mpi  # one short process (~0.5 s): this one has torch loaded by others
def test_an_emulated_run_needs_no_torch():
    """The trainer's import and the emulated path's options load no torch (one process:
    this test's own has torch loaded by others)."""
    code = ("import sys; from hpcio.train.trainer import torch_needs; "
            "from hpcio.train.options import parse_args; "
            "from hpcio.train.exchange import exchange_plan; "
            "a = parse_args(['--data', 'x', '--model', 'emulate']); "
            "assert not torch_needs(a, exchange_plan(None, None, a.exchange_via, None, 2)); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_torch_features_are_named():
    from hpcio.train.trainer import torch_needs
    barrier = {"mode": "barrier", "via": "tcp"}
    a = parse_args(["--data", "x", "--model", "emulate", "--checkpoint-every", "2",
                    "--device", "cuda"])
    assert torch_needs(a, barrier) == ["--device cuda (each batch copied to the GPU)",
                                       "checkpoints"]
    a = parse_args(["--data", "x", "--model", "emulate", "--preprocess", "on"])
    assert torch_needs(a, {"mode": "measured", "via": "gloo"}) == [
        "preprocessing into tensors", "the step's exchange over gloo"]
    assert torch_needs(parse_args(["--data", "x", "--model", "lenet"]), {}) == [
        "model lenet", "preprocessing into tensors"]


def test_registries():
    assert set(TRANSPORTS) == {"tcp", "gloo", "mpi"}
    assert EXCHANGE_MODELS == (*MODELS, "none")


# gloo's words when a peer's process or node is gone (seen at 4 nodes x 2 ranks, one node's
# ranks killed mid-run)
RESET = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error "
         "[10.254.2.13]:11663: Connection reset by peer. This is typically caused by a remote "
         "worker hanging or bugs in the application.")
CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] "
          "Connection closed by peer [::ffff:10.254.2.14]:15077. This is typically caused by "
          "a remote worker crashing.")


@pytest.mark.parametrize("message, host, addr", [
    (RESET, "hpcio-n3", "10.254.2.13"), (CLOSED, "hpcio-n4", "10.254.2.14")])
def test_a_lost_peer_names_its_node(message, host, addr):
    from hpcio.train.exchange import lost_peer
    hosts = {"10.254.2.13": "hpcio-n3", "10.254.2.14": "hpcio-n4"}
    line = lost_peer(message, hosts)
    assert line.startswith(f"the gradient exchange lost its connection to {host} ({addr})")
    assert "\n" not in line
    assert lost_peer("some other failure", hosts) is None
