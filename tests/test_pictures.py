"""Synthetic pictures: deterministic, class-dependent, and sized like the real datasets."""

import numpy as np
import pytest

from hpcio.data import pictures
from hpcio.data.presets import PRESETS, get_preset
from hpcio.errors import HpcioError


@pytest.mark.parametrize("name", list(PRESETS))
def test_records_depend_only_on_seed_and_id(name):
    p = PRESETS[name]
    ids = np.arange(100, 108)
    whole, lab = pictures.render(p.style, 7, ids, p.shape, p.classes)
    parts = [pictures.render(p.style, 7, ids[k:k + 3], p.shape, p.classes) for k in (0, 3, 6)]
    assert np.array_equal(whole, np.concatenate([x for x, _ in parts]))
    assert np.array_equal(lab, np.concatenate([y for _, y in parts]))
    other, _ = pictures.render(p.style, 8, ids, p.shape, p.classes)
    assert whole.shape == (8,) + p.shape and whole.dtype == np.uint8
    assert not np.array_equal(whole, other)


def test_labels_cover_the_classes_uniformly():
    lab = pictures.labels(0, np.arange(20000), 10)
    counts = np.bincount(lab, minlength=10)
    assert lab.min() == 0 and lab.max() == 9
    assert counts.min() > 1800 and counts.max() < 2200
    assert pictures.labels(0, np.arange(5000), 1000).max() < 1000


@pytest.mark.parametrize("name,lo,hi,n", [("mnist", 240, 300, 300),
                                          ("cifar10", 1800, 4000, 200),
                                          ("imagenet", 90_000, 130_000, 12)])
def test_encoded_sizes_match_the_real_datasets(name, lo, hi, n):
    """Lim et al. 2016: MNIST PNG just under 300 B, CIFAR-10 PNG < 4 KB, ImageNet JPEG
    ~110 KB."""
    p = PRESETS[name]
    px, _ = pictures.render(p.style, 0, np.arange(n), p.shape, p.classes)
    _, lengths = pictures.encode(px, p.encoding, p.quality)
    assert lo < lengths.mean() < hi, lengths.mean()


def test_pictures_are_not_noise():
    p = PRESETS["mnist"]
    px, _ = pictures.render(p.style, 0, np.arange(50), p.shape, p.classes)
    _, png = pictures.encode(px, "png")
    noise = np.random.default_rng(0).integers(0, 256, px.shape, dtype=np.uint8)
    _, png_noise = pictures.encode(noise, "png")
    assert png.mean() < 0.5 * p.record_bytes < png_noise.mean()
    ink = (px > 128).mean()
    assert 0.05 < ink < 0.35  # strokes, not a blank or a filled square


def test_encode_decode_round_trip():
    p = PRESETS["cifar10"]
    px, _ = pictures.render(p.style, 3, np.arange(5), p.shape, p.classes)
    for enc in ("raw", "png"):
        data, lengths = pictures.encode(px, enc)
        offs = np.concatenate([[0], np.cumsum(lengths)])
        for k in range(5):
            rec = data[offs[k]:offs[k + 1]]
            assert np.array_equal(pictures.decode(rec, enc, p.shape), px[k])
            if enc == "png":
                assert pictures.sniff(rec) == "png"
    data, lengths = pictures.encode(px, "jpeg", 90)
    rec = data[:lengths[0]]
    assert pictures.sniff(rec) == "jpeg"
    assert np.abs(pictures.decode(rec, "jpeg").astype(int) - px[0]).mean() < 8


def test_unknown_names_are_one_line_errors():
    with pytest.raises(HpcioError, match="unknown preset 'svhn'"):
        get_preset("svhn")
    with pytest.raises(HpcioError, match="unknown encoding 'webp'"):
        pictures.encode(np.zeros((1, 2, 2, 1), np.uint8), "webp")
