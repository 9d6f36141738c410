"""ResNet-50 (He et al. 2016; the torchvision v1.5 layout: stride on the 3x3 convolution),
25,557,032 parameters, defined here because torchvision has no CPU wheel beside torch."""

from torch import nn

__all__ = ["ResNet", "Bottleneck", "resnet50"]


def _conv_bn(cin, cout, k, stride=1):
    return [nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, bias=False),
            nn.BatchNorm2d(cout)]


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride), 1x1 expand x4, plus the shortcut."""

    expansion = 4

    def __init__(self, cin, width, stride=1):
        super().__init__()
        cout = width * self.expansion
        self.body = nn.Sequential(
            *_conv_bn(cin, width, 1), nn.ReLU(inplace=True),
            *_conv_bn(width, width, 3, stride), nn.ReLU(inplace=True),
            *_conv_bn(width, cout, 1),
        )
        self.shortcut = (nn.Sequential(*_conv_bn(cin, cout, 1, stride))
                         if stride != 1 or cin != cout else nn.Identity())
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


class ResNet(nn.Module):
    """Stem (7x7/2 conv, 3x3/2 max-pool), four stages of bottlenecks, global average
    pool, fully connected classifier. Input 3x224x224."""

    def __init__(self, layers=(3, 4, 6, 3), num_classes=1000):
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, 64, 7, 2), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, padding=1))
        stages, cin = [], 64
        for i, n in enumerate(layers):
            width = 64 << i
            for j in range(n):
                stages.append(Bottleneck(cin, width, stride=2 if (j == 0 and i > 0) else 1))
                cin = width * Bottleneck.expansion
        self.stages = nn.Sequential(*stages)
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(cin, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        return self.head(self.stages(self.stem(x)))


def resnet50(num_classes=1000):
    return ResNet((3, 4, 6, 3), num_classes)
