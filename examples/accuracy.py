"""Print the accuracy of model outputs (.npy, [N, ..., classes]) against labels (.npy, [N])."""

import sys

import numpy as np


def main(outputs_path: str, labels_path: str) -> int:
    y = np.load(outputs_path)
    labels = np.load(labels_path)
    pred = y.reshape(y.shape[0], -1).argmax(axis=1)
    acc = float((pred == labels).mean())
    print(f"accuracy of the generated C on {labels.size} test samples: {acc:.2%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
