"""BVLC reference CaffeNet (AlexNet-like), without grouped convolutions (62,378,344
parameters, the count Lim et al. 2016 give; the grouped original has 60,965,224)."""

from torch import nn

__all__ = ["CaffeNet"]


def _lrn():
    # Caffe's LRN across channels: x / (1 + alpha/n * sum x^2)^beta, the formula
    # torch's LocalResponseNorm uses too
    return nn.LocalResponseNorm(5, alpha=1e-4, beta=0.75, k=1.0)


class CaffeNet(nn.Module):
    """conv1 96 11x11/4, pool, LRN, conv2 256 5x5, pool, LRN, conv3 384, conv4 384,
    conv5 256 (3x3), pool, fc6 4096, fc7 4096 (dropout 0.5), fc8 N. Input 3x227x227.

    CaffeNet pools before normalising (AlexNet normalises first); pooled sizes are
    rounded up as in Caffe (55 -> 27 -> 13 -> 6).
    """

    def __init__(self, num_classes=1000):
        super().__init__()
        relu = lambda: nn.ReLU(inplace=True)  # noqa: E731
        pool = lambda: nn.MaxPool2d(3, 2, ceil_mode=True)  # noqa: E731
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, 11, stride=4), relu(), pool(), _lrn(),
            nn.Conv2d(96, 256, 5, padding=2), relu(), pool(), _lrn(),
            nn.Conv2d(256, 384, 3, padding=1), relu(),
            nn.Conv2d(384, 384, 3, padding=1), relu(),
            nn.Conv2d(384, 256, 3, padding=1), relu(), pool(),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(256 * 6 * 6, 4096), relu(), nn.Dropout(0.5),
            nn.Linear(4096, 4096), relu(), nn.Dropout(0.5),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))
