"""The models a training job can run, by name: ``make_model("lenet")``.

Each :class:`ModelSpec` carries what the rest of hpcio needs without building the model:
the input shape the pipeline resizes to, the default class count, and the reference
parameter count (checked by the tests; Lim et al. 2016 for the Caffe nets, torchvision for
ResNet-50). The emulated model (a timed sleep) is not a torch model and lives with the
trainer.

The registry names each model's builder by where it lives and imports it only to build
one, so the command line, the exchange sizes and the tests' names load without torch.
"""

from dataclasses import dataclass
from importlib import import_module
from typing import Tuple

from ...errors import HpcioError, lookup

__all__ = ["ModelSpec", "MODELS", "make_model", "count_params"]


@dataclass(frozen=True)
class ModelSpec:
    """A model by name: its builder (``module.callable`` in this package), input (C, H, W),
    default class count, and parameter count at that class count."""

    name: str
    home: str
    input_shape: Tuple[int, int, int]
    classes: int
    params: int

    def build(self, num_classes):
        """The ``nn.Module`` with ``num_classes`` outputs; its module (torch: seconds) is
        imported here, on the first build."""
        module, _, builder = self.home.rpartition(".")
        return getattr(import_module(f".{module}", __name__), builder)(num_classes=num_classes)


MODELS = {s.name: s for s in (
    ModelSpec("lenet", "lenet.LeNet", (1, 28, 28), 10, 431_080),
    ModelSpec("cifar-quick", "cifar_quick.CifarQuick", (3, 32, 32), 10, 145_578),
    ModelSpec("caffenet", "caffenet.CaffeNet", (3, 227, 227), 1000, 62_378_344),
    ModelSpec("resnet50", "resnet.resnet50", (3, 224, 224), 1000, 25_557_032),
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
