"""The paper-scale adaptation tasks: a ResNet18-class and a MobileNetV2-class model, trained here in
float on upright Fashion-MNIST, converted to INT8 with `zoflash convert`, each adapted to two image
shifts (a rotation and an appearance shift) by training its head and last block.

    python benchmarks/make_paper_tasks.py            # -> build/paper/{resnet18,mbv2}.tflite, fmnist_{rotate,contrast}.npz
    python benchmarks/experiments.py --paper --model build/paper/resnet18.tflite \
        --data build/paper/fmnist_contrast.npz --train last:3 --cluster tcp://127.0.0.1:8786

Models (Keras, `weights=None`, 32x32x1 input, 10 classes, trained from scratch):
  * resnet18: the ResNet18 topology (a 3x3 stem, four stages of two basic blocks, 1x1 projection
    shortcuts, global average pooling, a dense head) at width 1/8 (8-16-32-64 channels), the stem
    at stride 2 so the last stage runs at 2x2 (every tap of its 3x3 kernels sees data). Its last
    block (two 3x3 CONV_2D, 64 -> 64) and head: `--train last:3`, 74,506 parameters.
  * mbv2: Keras' MobileNetV2 at alpha 0.35 (as tests/fixtures/fmnist_mbv2.tflite). Its last block
    (the 1x1 CONV_2D to 1280 channels) and head: `--train last:2`, 157,450 parameters.
The widths are what two shared cores train and search in a session, and what the STM32N6 holds
with the training state; the paper's are the full ResNet18 and MobileNetV2 1.0.

Shifts (the model never saw a shifted image), both on uint8 pixels, rounded back to uint8:
  * rotate: 30 degrees counter-clockwise (bilinear, zero fill), as the vision task;
  * contrast: a grey, low-contrast capture: 80 + 0.35 x pixel (the background at 80, the full
    range at 35%).
Data: Fashion-MNIST (Zalando Research, MIT licence) from the idx files of Debian's
`dataset-fashion-mnist` package; 12,000 seeded training images pretrain, 800 others form each
adaptation set's training split and 500 test images its test split (the same images in both
shifts). Deterministic on one machine and TF version (fixed seeds, op determinism, two threads).
Prints the accuracies it measures (float and TFLM int8, source and target, and the float retrain
of the same trainable set on the adaptation split: the first-order ceiling).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import make_fixtures as fx  # noqa: E402
import make_vision_task as vision  # noqa: E402  (Fashion-MNIST reading, padding, rotation, MobileNetV2)

SEED = 20261206
N_PRETRAIN, N_ADAPT_TRAIN, N_ADAPT_TEST = 12000, 800, 500
EPOCHS = 8
CONTRAST = (80.0, 0.35)  # background level and gain of the appearance shift
TRAIN = {"resnet18": "last:3", "mbv2": "last:2"}  # the last block and the head (weighted layers from the end)


def contrast(img: np.ndarray) -> np.ndarray:
    level, gain = CONTRAST
    return np.clip(np.round(level + gain * img.astype(np.float32)), 0, 255).astype(np.uint8)


SHIFTS = {"rotate": vision.shift, "contrast": contrast}


def resnet18(bs, width: int = 8):
    tf = fx.tf
    L = tf.keras.layers

    def conv_bn(x, ch, stride, name, relu=True):
        x = L.Conv2D(ch, 3, stride, padding="same", use_bias=False, name=f"{name}_conv")(x)
        x = L.BatchNormalization(name=f"{name}_bn")(x)
        return L.ReLU(name=f"{name}_relu")(x) if relu else x

    def basic(x, ch, stride, name):
        y = conv_bn(x, ch, stride, f"{name}_a")
        y = conv_bn(y, ch, 1, f"{name}_b", relu=False)
        if stride != 1 or x.shape[-1] != ch:
            x = L.Conv2D(ch, 1, stride, use_bias=False, name=f"{name}_proj")(x)
            x = L.BatchNormalization(name=f"{name}_proj_bn")(x)
        return L.ReLU(name=f"{name}_out")(L.Add(name=f"{name}_add")([x, y]))

    i = tf.keras.Input((vision.SIZE, vision.SIZE, 1), batch_size=bs)
    x = conv_bn(i, width, 2, "stem")
    for stage, (mult, stride) in enumerate(((1, 1), (2, 2), (4, 2), (8, 2))):
        for block in range(2):
            x = basic(x, width * mult, stride if block == 0 else 1, f"s{stage + 1}b{block + 1}")
    x = L.GlobalAveragePooling2D(name="pool")(x)
    o = L.Dense(10, activation="softmax", name="head")(x)
    return tf.keras.Model(i, o, name="resnet18")


BUILDERS = {"resnet18": resnet18, "mbv2": vision.build}


def float_ceiling(name: str, model, x_tr, y_tr, x_te, y_te) -> float:
    """The float retrain of the trained set (last block and head) on the adaptation split."""
    tf = fx.tf
    fx.set_seed(SEED + 1)
    m = BUILDERS[name](None)
    m.set_weights(model.get_weights())
    weighted = [
        ly
        for ly in vision.flat_layers(m)
        if ly.get_weights() and not isinstance(ly, tf.keras.layers.BatchNormalization)
    ]
    trained = {id(ly) for ly in weighted[-int(TRAIN[name].split(":")[1]) :]}
    for ly in vision.flat_layers(m):
        ly.trainable = id(ly) in trained
    m.compile(tf.keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy")
    m.fit(x_tr, y_tr, epochs=30, batch_size=32, verbose=0)
    return fx.keras_acc(m, x_te, y_te)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "build" / "paper")
    ap.add_argument("--models", default="resnet18,mbv2")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    fx._import_tf()
    tf = fx.tf
    xtr_all, ytr_all = vision.read_idx("train-images-idx3-ubyte.gz"), vision.read_idx("train-labels-idx1-ubyte.gz")
    xte_all, yte_all = vision.read_idx("t10k-images-idx3-ubyte.gz"), vision.read_idx("t10k-labels-idx1-ubyte.gz")
    rng = np.random.default_rng(SEED)
    perm = rng.permutation(len(xtr_all))
    pre, adapt = perm[:N_PRETRAIN], perm[N_PRETRAIN : N_PRETRAIN + N_ADAPT_TRAIN]
    test = rng.permutation(len(xte_all))[:N_ADAPT_TEST]
    x_pre, y_pre = vision.to_input(xtr_all[pre]), ytr_all[pre].astype(np.int64)
    x_src_te, y_te = vision.to_input(xte_all[test]), yte_all[test].astype(np.int64)
    y_tr = ytr_all[adapt].astype(np.int64)
    sets = {}
    for shift_name, fn in SHIFTS.items():
        sets[shift_name] = (vision.to_input(fn(xtr_all[adapt])), vision.to_input(fn(xte_all[test])))
        np.savez_compressed(
            args.out / f"fmnist_{shift_name}.npz",
            x_train=sets[shift_name][0],
            y_train=y_tr,
            x_test=sets[shift_name][1],
            y_test=y_te,
        )
    np.savez_compressed(args.out / "calibration.npz", x=x_pre[:500])
    for name in args.models.split(","):
        fx.set_seed(SEED)
        m = BUILDERS[name](None)
        m.compile(tf.keras.optimizers.Adam(2e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
        m.fit(x_pre, y_pre, epochs=EPOCHS, batch_size=64, verbose=2, shuffle=True)
        vision.set_bn_statistics(m, x_pre[: vision.N_BN])
        keras_path, tflite = args.out / f"{name}.keras", args.out / f"{name}.tflite"
        m.save(keras_path)
        subprocess.run(
            [sys.executable, "-m", "zoflash", "convert", "--keras", str(keras_path),
             "--calibration", str(args.out / "calibration.npz"), "--out", str(tflite)],
            check=True,
        )  # fmt: skip
        buf = tflite.read_bytes()
        print(f"{name}: {m.count_params()} parameters, {len(buf)} bytes int8, --train {TRAIN[name]}")
        print(f"  source: float {100 * fx.keras_acc(m, x_src_te, y_te):.1f}%, "
              f"int8 {100 * fx.accuracy(fx.tflm_predict(buf, x_src_te), y_te):.1f}%")  # fmt: skip
        for shift_name, (x_tr, x_te) in sets.items():
            print(
                f"  {shift_name}: float {100 * fx.keras_acc(m, x_te, y_te):.1f}%, "
                f"int8 {100 * fx.accuracy(fx.tflm_predict(buf, x_te), y_te):.1f}%, "
                f"float retrain of {TRAIN[name]} {100 * float_ceiling(name, m, x_tr, y_tr, x_te, y_te):.1f}%"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
