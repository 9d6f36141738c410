"""LeNet as in Caffe's ``examples/mnist/lenet_train_test.prototxt`` (431,080 parameters)."""

from torch import nn

__all__ = ["LeNet"]


class LeNet(nn.Module):
    """conv 20 5x5, max-pool 2, conv 50 5x5, max-pool 2, ip 500, ReLU, ip N.

    Caffe's LeNet has no ReLU after the convolutions; only the first inner product has one.
    Input 1x28x28.
    """

    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2),
            nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(), nn.Linear(50 * 4 * 4, 500), nn.ReLU(inplace=True),
            nn.Linear(500, num_classes),
        )

    def forward(self, x):
        return self.classifier(self.features(x))
