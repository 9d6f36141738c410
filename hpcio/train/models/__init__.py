"""The models a training job can run, by name: ``make_model("lenet")``.

Each :class:`ModelSpec` carries what the rest of hpcio needs without building the model:
the input shape the pipeline resizes to, the default class count, and the reference
parameter count (checked by the tests; Lim et al. 2016 for the Caffe nets, torchvision for
ResNet-50). The emulated model (a timed sleep) is not a torch model and lives with the
trainer.
"""

from dataclasses import dataclass
from typing import Callable, Tuple

from ...errors import HpcioError, lookup
from .caffenet import CaffeNet
from .cifar_quick import CifarQuick
from .lenet import LeNet
from .resnet import resnet50

__all__ = ["ModelSpec", "MODELS", "make_model", "count_params"]


@dataclass(frozen=True)
class ModelSpec:
    """A model by name: ``build(num_classes) -> nn.Module``, input (C, H, W), default
    class count, and parameter count at that class count."""

    name: str
    build: Callable
    input_shape: Tuple[int, int, int]
    classes: int
    params: int


MODELS = {s.name: s for s in (
    ModelSpec("lenet", LeNet, (1, 28, 28), 10, 431_080),
    ModelSpec("cifar-quick", CifarQuick, (3, 32, 32), 10, 145_578),
    ModelSpec("caffenet", CaffeNet, (3, 227, 227), 1000, 62_378_344),
    ModelSpec("resnet50", resnet50, (3, 224, 224), 1000, 25_557_032),
)}


def count_params(module):
    """Trainable parameters (what the papers count; BatchNorm running stats excluded)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def make_model(name, num_classes=None):
    """Build model ``name`` with ``num_classes`` outputs (default: the spec's); returns
    ``(module, spec)``. Unknown names and bad class counts raise :class:`HpcioError`."""
    spec = lookup(MODELS, name, "model")
    if num_classes is None:
        num_classes = spec.classes
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise HpcioError(f"model {name}: number of classes must be a positive integer, "
                         f"not {num_classes!r}", everywhere=True)
    return spec.build(num_classes=num_classes), spec
