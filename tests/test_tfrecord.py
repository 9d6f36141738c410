"""TFRecord as TensorFlow frames it, records as DLIO's tf.train.Example: hpcio's files and
files made here the way TensorFlow lays them out are indexed at each record's data; both
readers deliver the same Examples, every CRC is checked, and decoding takes the image out."""

import os
import pathlib
import struct

import numpy as np
import pytest
from crc32c import crc32c

from hpcio.data import pictures
from hpcio.data.dataset import open_dataset
from hpcio.data.presets import PRESETS
from hpcio.datagen.importers import index_path
from hpcio.errors import HpcioError
from hpcio.formats import FORMATS, detect
from hpcio.formats.example import example_images, payloads
from hpcio.formats.tfrecord import masked_crc
from hpcio.train.decode import decode_records

from common.datasets import make_dataset
from common.failure import one_line
from common.inproc import run_main
from common.mpi import run_mpi, run_py
from test_npz import read_all

DATAGEN = ["-m", "hpcio.datagen"]


# ---- TensorFlow's layout, written and read here without hpcio ---------------------------

def mask(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(data):
    n = struct.pack("<Q", len(data))
    return n + struct.pack("<I", mask(crc32c(n))) + data + struct.pack("<I", mask(crc32c(data)))


def unframe(raw):
    """[(data offset, data)] of a TFRecord file's bytes, CRCs checked."""
    out, at = [], 0
    while at < len(raw):
        n = struct.unpack("<Q", raw[at:at + 8])[0]
        assert struct.unpack("<I", raw[at + 8:at + 12])[0] == mask(crc32c(raw[at:at + 8]))
        data = raw[at + 12:at + 12 + n]
        assert struct.unpack("<I", raw[at + 12 + n:at + 16 + n])[0] == mask(crc32c(data))
        out.append((at + 12, data))
        at += n + 16
    return out


def var(x):
    x &= (1 << 64) - 1
    out = b""
    while True:
        out += bytes([(x & 0x7F) | (0x80 if x >> 7 else 0)])
        x >>= 7
        if not x:
            return out


def ld(field, payload):
    return var(field << 3 | 2) + var(len(payload)) + payload


def example(features):
    """A tf.train.Example of {name: bytes | int | float}; int64 lists unpacked (as older
    writers do), entries in the given order."""
    entries = b""
    for key, v in features.items():
        if isinstance(v, bytes):
            feat = ld(1, ld(1, v))
        elif isinstance(v, float):
            feat = ld(2, ld(1, struct.pack("<f", v)))
        else:
            feat = ld(3, var(1 << 3) + var(v))
        entries += ld(1, ld(1, key.encode()) + ld(2, feat))
    return ld(1, entries)


def parse(ex):
    """{name: value} of an Example, parsed here by hand."""
    def fields(b):
        p, out = 0, []
        while p < len(b):
            tag, p = _varint(b, p)
            if tag & 7 == 2:
                n, p = _varint(b, p)
                out.append((tag >> 3, b[p:p + n]))
                p += n
            else:
                v, p = _varint(b, p)
                out.append((tag >> 3, v))
        return out
    got = {}
    for _, entry in fields(dict(fields(ex))[1]):
        e = dict(fields(entry))
        kind, body = fields(e[2])[0]
        (_, v), = fields(body)
        got[e[1].decode()] = v if kind == 1 else (_varint(v, 0)[0] if isinstance(v, bytes)
                                                  else v)
    return got


def _varint(b, p):
    x = s = 0
    while True:
        c = b[p]
        p += 1
        x |= (c & 0x7F) << s
        if c < 0x80:
            return x, p
        s += 7


# ---- hpcio's files ----------------------------------------------------------------------

@pytest.mark.parametrize("enc", ["raw", "png"])
def test_round_trip_both_readers(tmp_path, enc):
    ds = make_dataset(tmp_path, "tfrecord", enc, records=23, shards=2, seed=4)
    ds = open_dataset(ds.root)
    assert ds.manifest["container"] == "example" and len(ds.index.files) == 2
    p = PRESETS["mnist"]
    px, lab = pictures.render(p.style, 4, np.arange(23), p.shape, p.classes)
    naive, nl = read_all(ds, "naive")
    coord, cl = read_all(ds, "coordinated")
    assert naive == coord and nl == cl == dict(enumerate(lab.tolist()))
    for shard in ds.manifest["shards"]:  # TensorFlow's framing, read back by hand
        with open(os.path.join(ds.root, shard["path"]), "rb") as f:
            recs = unframe(f.read())
        lo, hi = shard["records"]
        assert [o for o, _ in recs] == ds.index.offset[lo:hi].tolist()
        for i, (_, data) in zip(range(lo, hi), recs):
            assert naive[i] == data
            got = parse(data)
            assert got["label"] == lab[i] and got["size"] == len(got["image"])
            assert np.array_equal(pictures.decode(got["image"], enc, p.shape), px[i])
    ds.verify_checksums()
    ds.verify_records()


def test_decode_takes_the_image_out(tmp_path):
    ds = make_dataset(tmp_path, "tfrecord", "png", records=9, shards=1, seed=1)
    p = PRESETS["mnist"]
    px, _ = pictures.render(p.style, 1, np.arange(9), p.shape, p.classes)

    class Batch:
        ids = np.arange(9)

        def __init__(self, data, offsets):
            self.data, self.offsets = data, offsets

        def __len__(self):
            return 9
    with open(ds.path(0), "rb") as f:
        raw = np.frombuffer(f.read(), np.uint8)
    idx = ds.index
    data = np.concatenate([raw[o:o + n] for o, n in zip(idx.offset, idx.length)])
    offsets = np.concatenate([[0], np.cumsum(idx.length)])
    assert np.array_equal(decode_records(Batch(data, offsets), ds.manifest), px)
    with pytest.raises(HpcioError, match="not a tf.train.Example"):
        decode_records(Batch(np.full(int(offsets[-1]), 0xFF, np.uint8), offsets),
                       ds.manifest)


def test_masked_crc_is_tensorflows():
    assert masked_crc(b"") == 0xA282EAD8  # crc32c("") is 0
    for b in (b"a", b"123456789", bytes(range(256))):
        assert masked_crc(b) == mask(crc32c(b))
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


# ---- files made elsewhere ---------------------------------------------------------------

def tf_files(folder, counts=(5, 4), seed=0):
    """Files as TensorFlow writes them: Examples of images of varied lengths, the first
    file's as DLIO makes them (image and size, no label), the others' labelled, in
    another order and with a float feature too."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    images, labels = [], []
    for f, n in enumerate(counts):
        out = b""
        for k in range(n):
            img = rng.integers(0, 256, int(rng.integers(1, 300)), dtype=np.uint8).tobytes()
            lab = int(rng.integers(0, 7)) if f else -1
            feats = {"image": img, "size": len(img)} if f == 0 else \
                {"size": len(img), "scale": 0.5, "label": lab, "image": img}
            out += frame(example(feats))
            images.append(img)
            labels.append(lab)
        with open(os.path.join(folder, f"img_{f + 1}_of_{len(counts)}.tfrecord"), "wb") as fh:
            fh.write(out)
    return images, labels


def test_index_foreign_files(tmp_path):
    images, labels = tf_files(tmp_path / "train")
    assert detect(str(tmp_path / "train")).name == "tfrecord"
    ds = open_dataset(index_path(str(tmp_path / "train")).root)
    assert ds.records == 9 and ds.manifest["container"] == "example"
    assert ds.index.label.tolist() == labels
    naive, _ = read_all(ds, "naive")
    coord, _ = read_all(ds, "coordinated")
    assert naive == coord
    data = np.frombuffer(b"".join(naive[i] for i in range(9)), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(naive[i]) for i in range(9)])])
    got, goff = payloads(data, offsets)
    assert [got[goff[k]:goff[k + 1]].tobytes() for k in range(9)] == images
    ds.verify_checksums()
    ds.verify_records()


def test_index_records_that_are_not_examples(tmp_path):
    recs = [bytes([k]) * (k + 1) for k in range(6)]
    (tmp_path / "plain.tfrecord").write_bytes(b"".join(frame(r) for r in recs))
    ds = open_dataset(index_path(str(tmp_path / "plain.tfrecord"),
                                 out=str(tmp_path / "i")).root)
    assert "container" not in ds.manifest and ds.index.label.tolist() == [-1] * 6
    naive, _ = read_all(ds, "naive")
    coord, _ = read_all(ds, "coordinated")
    assert naive == coord == dict(enumerate(recs))


def test_vectorised_parse_is_the_hand_parse():
    rng = np.random.default_rng(3)
    exs, want = [], []
    for k in range(40):
        img = rng.integers(0, 256, int(rng.integers(0, 2000)), dtype=np.uint8).tobytes()
        lab = int(rng.integers(-3, 1 << 40))
        feats = [("image", img), ("label", lab), ("size", len(img))]
        rng.shuffle(feats)
        exs.append(example(dict(feats)))
        want.append((img, lab))
    buf = np.frombuffer(b"".join(exs), np.uint8)
    start = np.concatenate([[0], np.cumsum([len(e) for e in exs])[:-1]])
    off, ln, lab = example_images(buf, start, [len(e) for e in exs])
    for k, (img, la) in enumerate(want):
        a = int(start[k] + off[k])
        assert buf[a:a + ln[k]].tobytes() == img and lab[k] == la


# ---- bad files --------------------------------------------------------------------------

@pytest.mark.hostile
def test_bad_data_crc_refused_with_file_and_offset(tmp_path):
    tf_files(tmp_path / "t")
    p = tmp_path / "t" / "img_2_of_2.tfrecord"
    raw = bytearray(p.read_bytes())
    at = unframe(bytes(raw))[2][0] - 12  # the third record's frame
    raw[at + 20] ^= 0x40
    p.write_bytes(bytes(raw))
    with pytest.raises(HpcioError, match=rf"img_2_of_2\.tfrecord: corrupt record at byte "
                                         rf"{at}: the CRC of its \d+ data bytes"):
        index_path(str(tmp_path / "t"))
    line = one_line(run_main(DATAGEN + ["index", tmp_path / "t"]))
    assert f"img_2_of_2.tfrecord: corrupt record at byte {at}" in line


@pytest.mark.hostile
def test_bad_length_crc_and_truncation_refused(tmp_path):
    tf_files(tmp_path / "t", counts=(6,))
    p = tmp_path / "t" / "img_1_of_1.tfrecord"
    good = p.read_bytes()
    at = unframe(good)[4][0] - 12
    bad = bytearray(good)
    bad[at + 9] ^= 1
    p.write_bytes(bytes(bad))
    with pytest.raises(HpcioError, match=rf"img_1_of_1\.tfrecord: corrupt record at byte "
                                         rf"{at}: the CRC of its length field"):
        index_path(str(tmp_path / "t"))
    p.write_bytes(good[:-3])
    last = unframe(good)[5][0] - 12
    with pytest.raises(HpcioError, match=rf"img_1_of_1\.tfrecord: truncated record at "
                                         rf"byte {last} "):
        index_path(str(tmp_path / "t"))
    p.write_bytes(good + b"\x05\x00")
    with pytest.raises(HpcioError, match=rf"truncated record at byte {len(good)} \(the "
                                         rf"file ends inside its length field\)"):
        index_path(str(tmp_path / "t"))


@pytest.mark.hostile
def test_changed_or_truncated_after_indexing(tmp_path):
    ds = make_dataset(tmp_path, "tfrecord", "raw", records=12, shards=1)
    path = pathlib.Path(ds.path(0))
    good = path.read_bytes()
    i = 7
    at = int(ds.index.offset[i]) - 12
    bad = bytearray(good)
    bad[at + 12 + 30] ^= 0x01  # inside record 7's data: same size, other bytes
    path.write_bytes(bytes(bad))
    ds = open_dataset(ds.root)
    with pytest.raises(HpcioError, match=rf"shard-00000\.tfrecord: corrupt record at byte "
                                         rf"{at}: the CRC of its \d+ data bytes"):
        read_all(ds, "naive")
    with pytest.raises(HpcioError, match="CRC32C"):
        read_all(ds, "coordinated")
    path.write_bytes(good[:at + 100])  # a file cut short under an open dataset
    nat = FORMATS["tfrecord"].open_native(ds)
    try:
        assert nat.get(0) is not None
        with pytest.raises(HpcioError, match=rf"shard-00000\.tfrecord: truncated record "
                                             rf"at byte {at} "):
            nat.get(i)
    finally:
        nat.close()


# ---- MPI --------------------------------------------------------------------------------

@pytest.mark.mpi
def test_parallel_generate_is_the_serial_one(tmp_path):
    args = ["--format", "tfrecord", "--records", "30", "--shards", "3", "--encoding",
            "png", "--no-progress", "--seed", "2"]
    run_mpi(2, DATAGEN + ["generate", tmp_path / "p"] + args, check=True)
    p = run_main(DATAGEN + ["generate", tmp_path / "s"] + args)
    assert p.returncode == 0, p.stdout + p.stderr
    a, b = open_dataset(str(tmp_path / "p")), open_dataset(str(tmp_path / "s"))
    assert np.array_equal(a.index.crc, b.index.crc)
    for s, t in zip(a.manifest["shards"], b.manifest["shards"]):
        assert s["sha256"] == t["sha256"]


@pytest.mark.mpi
@pytest.mark.parametrize("reader,pre", [("naive", "off"), ("coordinated", "off"),
                                        ("coordinated", "on")])
def test_train_emulate(tmp_path, reader, pre):
    ds = make_dataset(tmp_path, "tfrecord", "png", records=48, shards=2)
    out = tmp_path / "run"
    p = run_mpi(2, ["-m", "hpcio.train", "--data", ds.root, "--model", "emulate",
                    "--reader", reader, "--batch", 4, "--steps", 3, "--epochs", 2,
                    "--compute-time", "0.002", "--preprocess", pre, "--out", out],
                timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (out / "summary.json").exists() and "AU %" in p.stdout


# ---- TensorFlow's ImageNet layout, compressed files, keys named -------------------------

def imagenet_files(folder, n=12, side=32):
    """Files as TensorFlow's build_imagenet_data.py writes them: JPEG bytes under
    ``image/encoded``, label 1..1000 under ``image/class/label``, its other features."""
    from io import BytesIO
    from PIL import Image
    rng = np.random.default_rng(5)
    os.makedirs(folder, exist_ok=True)
    labels, out = [], b""
    for k in range(n):
        b = BytesIO()
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(b, "JPEG")
        lab = 1 + k % 3
        feats = {"image/height": side, "image/width": side, "image/colorspace": b"RGB",
                 "image/channels": 3, "image/class/label": lab,
                 "image/class/synset": b"n01440764", "image/format": b"JPEG",
                 "image/filename": b"n01440764_%d.JPEG" % k, "image/encoded": b.getvalue()}
        out += frame(example(feats))
        labels.append(lab)
    (pathlib.Path(folder) / "train-00000-of-00001.tfrecord").write_bytes(out)
    return labels


@pytest.mark.mpi
def test_tensorflow_imagenet_layout_indexed_and_trained(tmp_path):
    labels = imagenet_files(tmp_path / "inet")
    p = run_main(DATAGEN + ["index", tmp_path / "inet"])
    assert p.returncode == 0, p.stderr
    ds = open_dataset(str(tmp_path / "inet"))
    m = ds.manifest
    assert m["tfrecord"]["image"] == "image/encoded" and m["encoding"] == "jpeg"
    assert list(ds.shape) == [32, 32, 3] and ds.index.label.tolist() == labels
    assert ds.classes == 4
    p = run_py(["-m", "hpcio.train", "--data", ds.root, "--model", "lenet", "--batch", 4,
                "--steps", 2, "--epochs", 1, "--progress", "off", "--out", tmp_path / "r"],
               timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr


def test_keys_named_and_options_that_do_not_apply(tmp_path):
    feats = [{"pic": bytes([k]) * 9, "cls": k} for k in range(4)]
    (tmp_path / "a.tfrecord").write_bytes(b"".join(frame(example(f)) for f in feats))
    p = run_main(DATAGEN + ["index", tmp_path / "a.tfrecord", "--out", tmp_path / "i",
                            "--format-option", "image_key=pic,label_key=cls"])
    assert p.returncode == 0, p.stderr
    ds = open_dataset(str(tmp_path / "i"))
    assert ds.index.label.tolist() == [0, 1, 2, 3] and ds.manifest["tfrecord"]["image"] == "pic"
    p = run_main(DATAGEN + ["index", tmp_path / "a.tfrecord", "--out", tmp_path / "j",
                            "--images", "image/encoded"])
    assert "--images image/encoded: not every record is a tf.train.Example with one " \
        "'image/encoded' bytes feature" in one_line(p)
    lm = make_dataset(tmp_path / "l", "lmdb", "png", records=4)
    p = run_main(DATAGEN + ["index", os.path.join(lm.root, "shard-00000.lmdb"), "--out",
                            tmp_path / "k", "--labels", "y"])
    assert "--labels names what is inside HDF5, npz or TFRecord files; this is lmdb data" \
        in one_line(p)


@pytest.mark.parametrize("comp", ["GZIP", "ZLIB"])
def test_compressed_tfrecord_refused_naming_it(tmp_path, comp):
    import gzip
    import zlib
    raw = b"".join(frame(example({"image": bytes(50), "label": 1})) for _ in range(3))
    f = tmp_path / "c.tfrecord"
    f.write_bytes(gzip.compress(raw) if comp == "GZIP" else zlib.compress(raw))
    p = run_main(DATAGEN + ["index", f, "--out", tmp_path / "i"])
    assert f"{f}: a {comp}-compressed TFRecord: hpcio reads records at their byte " \
        "offsets (decompress it first: " in one_line(p)
    assert not (tmp_path / "i" / "hpcio.json").exists()
