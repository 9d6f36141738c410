"""The emulated gradient exchange: its size from the model or the data's preset, and
refusals; its timing under mpiexec is in tests/test_train.py."""

import pytest

from hpcio.data.presets import PRESETS
from hpcio.errors import HpcioError
from hpcio.train.dist import World
from hpcio.train.exchange import (EXCHANGE_MODELS, PRESET_MODELS, TRANSPORTS, NoExchange,
                                  check_fits, exchange_size, make_exchange)
from hpcio.train.models import MODELS
from hpcio.train.options import build_parser, parse_args


def test_size_is_the_models_float32_gradients():
    n, what = exchange_size("resnet50", None, {})
    assert n == 4 * 25_557_032 and "resnet50" in what
    assert exchange_size(None, 1000, {"preset": "mnist"})[0] == 1000
    assert exchange_size(None, 0, {})[0] == 0  # a barrier only
    none, what = exchange_size("none", None, {"preset": "imagenet"})
    assert none is None and "independently" in what


def test_default_is_the_model_of_the_datas_preset():
    assert set(PRESET_MODELS) == set(PRESETS)
    for preset, model in PRESET_MODELS.items():
        n, what = exchange_size(None, None, {"preset": preset})
        assert n == 4 * MODELS[model].params and preset in what
    n, what = exchange_size(None, None, {"format": "lmdb"})  # an import: no preset
    assert n is None and "no preset" in what
    helptext = " ".join(build_parser().format_help().split())
    assert "mnist: lenet" in helptext and "imagenet: resnet50" in helptext


def test_no_exchange_costs_nothing():
    assert NoExchange()(12.5) == (12.5, 12.5)
    assert make_exchange(None, "gloo", World(None, 0, 2, 0, 2, 1, 0, "h")).name == "none"
    assert make_exchange(1 << 20, "gloo", World(None, 0, 1, 0, 1, 1, 0, "h")).name == "none"


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
])
def test_bad_combinations_are_one_line(args, says):
    with pytest.raises(HpcioError) as e:
        parse_args(["--data", "x", "--model", "emulate"] + args)
    assert says in str(e.value) and e.value.everywhere


def test_registries():
    assert set(TRANSPORTS) == {"gloo", "mpi"}
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
