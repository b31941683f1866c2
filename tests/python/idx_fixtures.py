"""Synthetic MNIST-shaped IDX files for the twins' tests (test_mlp_twin.py, test_libtorch_twin.py)."""
import gzip

import numpy as np


def idx_bytes(kind, arr):
    """An uncompressed IDX images ([n, 784] as 28x28) or labels stream."""
    if kind == "images":
        n = arr.shape[0]
        head = (2051).to_bytes(4, "big") + n.to_bytes(4, "big") + (28).to_bytes(4, "big") + (28).to_bytes(4, "big")
    else:
        head = (2049).to_bytes(4, "big") + len(arr).to_bytes(4, "big")
    return head + np.asarray(arr, np.uint8).tobytes()


def write_dataset(d, n_train=100, n_test=30, seed=0):
    """The four gzip IDX files of a random data set in folder d (created); returns d."""
    rng = np.random.default_rng(seed)
    d.mkdir(parents=True, exist_ok=True)
    files = {
        "train-images-idx3-ubyte.gz": idx_bytes("images", rng.integers(0, 256, (n_train, 784))),
        "train-labels-idx1-ubyte.gz": idx_bytes("labels", rng.integers(0, 10, n_train)),
        "t10k-images-idx3-ubyte.gz": idx_bytes("images", rng.integers(0, 256, (n_test, 784))),
        "t10k-labels-idx1-ubyte.gz": idx_bytes("labels", rng.integers(0, 10, n_test)),
    }
    for name, raw in files.items():
        (d / name).write_bytes(gzip.compress(raw))
    return d
