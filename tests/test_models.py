"""Models: parameter counts match the references exactly, forward + backward works."""

import pytest
import torch

from hpcio.errors import HpcioError
from hpcio.train.models import MODELS, count_params, make_model

REFERENCE = {"lenet": 431_080, "cifar-quick": 145_578, "caffenet": 62_378_344,
             "resnet50": 25_557_032}


def test_registry_names():
    assert set(MODELS) == set(REFERENCE)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_param_count_and_step(name):
    torch.manual_seed(0)
    model, spec = make_model(name)
    assert spec.name == name
    assert count_params(model) == REFERENCE[name] == spec.params
    model.train()
    x = torch.rand(2, *spec.input_shape)
    y = torch.tensor([0, spec.classes - 1])
    out = model(x)
    assert out.shape == (2, spec.classes)
    assert torch.isfinite(out).all()
    torch.nn.functional.cross_entropy(out, y).backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0


@pytest.mark.parametrize("name", ["lenet", "cifar-quick"])
def test_num_classes(name):
    model, spec = make_model(name, num_classes=3)
    assert model(torch.rand(1, *spec.input_shape)).shape == (1, 3)
    # only the last layer changes: (in + 1) * (classes - 3) parameters fewer
    last = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    assert count_params(model) == spec.params - (last.in_features + 1) * (spec.classes - 3)


def test_unknown_model_lists_choices():
    with pytest.raises(HpcioError) as e:
        make_model("vgg16")
    assert "vgg16" in str(e.value)
    for name in REFERENCE:
        assert name in str(e.value)


@pytest.mark.parametrize("bad", [0, -1, 2.5, "10", True])
def test_bad_class_count(bad):
    with pytest.raises(HpcioError):
        make_model("lenet", num_classes=bad)
