"""Dataset presets: the three datasets of Lim et al. 2016 (MNIST, CIFAR-10, ImageNet).

Record counts, sample shapes and classes are the papers'; the default encoding is the one
their image-file runs used (PNG for MNIST and CIFAR-10, JPEG for ImageNet). ``style`` names
the synthetic picture renderer in :mod:`hpcio.images`; ``quality`` is the JPEG quality used
when a preset is written as JPEG (90: about 110 KB per 256x256 ImageNet picture).
"""

from dataclasses import dataclass

from ..errors import lookup

__all__ = ["Preset", "PRESETS", "get_preset"]


@dataclass(frozen=True)
class Preset:
    """What a synthetic dataset looks like: ``records`` samples of ``shape`` (H, W, C)
    uint8 pixels in ``classes`` classes."""

    name: str
    records: int
    shape: tuple
    classes: int
    encoding: str
    style: str
    quality: int = 90

    @property
    def record_bytes(self):
        """Bytes of one raw (unencoded) record."""
        h, w, c = self.shape
        return h * w * c


PRESETS = {
    "mnist": Preset("mnist", 60_000, (28, 28, 1), 10, "png", "digits"),
    "cifar10": Preset("cifar10", 50_000, (32, 32, 3), 10, "png", "scenes"),
    "imagenet": Preset("imagenet", 1_281_167, (256, 256, 3), 1000, "jpeg", "scenes", 95),
}


def get_preset(name):
    """The preset called ``name``, or a one-line error listing the known ones."""
    return lookup(PRESETS, name, "preset")
