"""Caffe's ``cifar10_quick`` (cuda-convnet's fast CIFAR-10 net, 145,578 parameters)."""

from torch import nn

__all__ = ["CifarQuick"]


class CifarQuick(nn.Module):
    """conv 32 5x5, max-pool 3/2, ReLU, conv 32 5x5, ReLU, avg-pool 3/2, conv 64 5x5, ReLU,
    avg-pool 3/2, ip 64, ip N. Input 3x32x32.

    Caffe rounds pooled sizes up (32 -> 16 -> 8 -> 4), hence ``ceil_mode=True``; the two
    inner products have no ReLU between them, as in the prototxt.
    """

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 5, padding=2), nn.MaxPool2d(3, 2, ceil_mode=True),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 32, 5, padding=2), nn.ReLU(inplace=True),
            nn.AvgPool2d(3, 2, ceil_mode=True),
            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(inplace=True),
            nn.AvgPool2d(3, 2, ceil_mode=True),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * 4 * 4, 64), nn.Linear(64, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))
