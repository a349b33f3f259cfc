"""An arena larger than any one SRAM region of the STM32N6 covers adjacent regions whole ([[span]]
in the board file): AXISRAM1..6 in development mode (the code then in FLEXMEM), the SRAM above
the boot ROM's image in flash boot.  A plan that fits without a span is never changed
(test_n6_fit.py and the goldens hold those).

The model with a 2.46 MB arena is generated here with TensorFlow (a conv stack at 224x224, the
arena need of a MobileNetV2 1.0/224 as the brief for this feature quoted it), so the path runs
without any downloaded model; Arm ML-zoo's MobileNetV2 1.0/224 INT8 is planned too when present
beside the public models (it is a Git LFS object, absent from the public snapshots).
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from conftest import PUBLIC

from zoflash import api
from zoflash.cli import main
from zoflash.errors import BoardError
from zoflash.targets.boards import BOOT_MODES, _board_files, load_board, parse_board
from zoflash.targets.budget import BudgetError

BOARDS = ("stm32n6570-dk", "nucleo-n657x0-q")
BIG_ARENA = 224 * 224 * (16 + 33)  # two conv outputs alive at once
ML_ZOO_MBV2 = PUBLIC / "mobilenet_v2_1.0_224_INT8.tflite"


@pytest.fixture(scope="module")
def big_arena_model(tmp_path_factory):
    """A full-INT8 model whose arena (2,458,624 bytes) is larger than any one SRAM region of the
    STM32N6 (AXISRAM3..6: 1,835,008) and than the SRAM flash boot leaves in one piece."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    tf = pytest.importorskip("tensorflow")
    from zoflash.compiler.convert import quiet

    tf.keras.utils.set_random_seed(224)
    x_in = tf.keras.Input((224, 224, 3), batch_size=1)
    x = tf.keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x_in)
    x = tf.keras.layers.Conv2D(33, 1, activation="relu")(x)
    x = tf.keras.layers.MaxPooling2D(32)(x)
    x = tf.keras.layers.Dense(10)(tf.keras.layers.Flatten()(x))
    samples = np.random.default_rng(224).uniform(-1, 1, (4, 1, 224, 224, 3)).astype(np.float32)
    conv = tf.lite.TFLiteConverter.from_keras_model(tf.keras.Model(x_in, x))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([s] for s in samples)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int8
    path = tmp_path_factory.mktemp("span") / "big_arena.tflite"
    with quiet():
        path.write_bytes(conv.convert())
    return path


def test_the_n6_boards_declare_their_spans():
    for board_id in BOARDS:
        board = load_board(board_id)
        spans = {s.name: s for s in board.spans}
        assert set(spans) == {"AXISRAM_TOP", "AXISRAM1_6"}
        # AXISRAM1 (0x34064000) to the end of AXISRAM6 (0x343C0000): every region in between is a member
        assert (spans["AXISRAM1_6"].origin, spans["AXISRAM1_6"].end) == (0x3406_4000, 0x343C_0000)
        assert spans["AXISRAM1_6"].boot == ("dev",)  # flash boot: the boot ROM's image is in AXISRAM2
        assert "IMAGE" not in spans["AXISRAM_TOP"].members and set(spans["AXISRAM_TOP"].boot) == set(BOOT_MODES)
        assert spans["AXISRAM_TOP"].enable == ("AXISRAM3", "AXISRAM4", "AXISRAM5", "AXISRAM6", "CACHEAXIRAM")


def _board_text(span: str) -> str:
    """The DK's board file with its [[span]] tables replaced by `span`."""
    text = _board_files()["stm32n6570-dk"].read_text()
    start, end = text.index("\n[[span]]\n") + 1, text.index("# --- end spans ---")
    return text[:start] + span + text[end:]


@pytest.mark.parametrize(
    ("span", "message"),
    [
        ('[[span]]\nname = "S"\nregions = ["AXISRAM1", "IMAGE"]\nboot = ["dev"]\n', "AXISRAM2 lie between"),
        ('[[span]]\nname = "S"\nregions = ["AXISRAM2", "AXISRAM1"]\nboot = ["dev"]\n', "address order"),
        ('[[span]]\nname = "S"\nregions = ["IMAGE", "XSPI2_NOR"]\nboot = ["dev"]\n', "of kind 'ram'"),
        ('[[span]]\nname = "S"\nregions = ["AXISRAM1", "AXISRAM2"]\nboot = ["usb"]\n', "boot modes: dev, flash"),
        ('[[span]]\nname = "RAM"\nregions = ["AXISRAM1", "AXISRAM2"]\nboot = ["dev"]\n', "no region or other span"),
    ],
)
def test_a_bad_span_is_refused(span, message):
    with pytest.raises(BoardError, match=message):
        parse_board(_board_text(span), "board file stm32n6570-dk.toml")


@pytest.mark.tf
@pytest.mark.parametrize("board", BOARDS)
def test_an_arena_larger_than_any_region_covers_axisram1_6(big_arena_model, board):
    assert api.compile_model(api.load_model(big_arena_model)).arena_size == BIG_ARENA
    plan = api.plan_memory(big_arena_model, board)
    place = plan.board.placement
    assert place["arena"] == "AXISRAM1_6"
    span = plan.board.region("AXISRAM1_6")
    # nothing else in the span's regions: the code, its constants, RAM data and stack went to FLEXMEM
    assert {place[k] for k in place if k not in ("arena", "stack_bytes")}.isdisjoint(span.members)
    assert place["code"] == place["stack"] == "FLEXMEM"
    by_name = {u.region.name: u for u in plan.regions}
    assert by_name["AXISRAM1_6"].used == BIG_ARENA and all(m not in by_name for m in span.members)
    # flash boot keeps the image where the boot ROM copies it: the SRAM above it holds 2.25 MiB
    with pytest.raises(BudgetError, match=r"AXISRAM_TOP 2359296 bytes\.\nIt fits in AXISRAM1_6 .* with --boot dev"):
        api.plan_memory(big_arena_model, board, boot="flash")


@pytest.mark.tf
def test_flash_boot_covers_the_sram_above_the_image(big_arena_model, tmp_path):
    """An arena of 2 MiB: more than AXISRAM3..6, less than the 2.25 MiB from the top of AXISRAM2
    (above the image) to the end of the NPU cache RAM; the stack then goes to FLEXMEM."""
    tf = pytest.importorskip("tensorflow")
    from zoflash.compiler.convert import quiet

    x_in = tf.keras.Input((256, 256, 4), batch_size=1)
    x = tf.keras.layers.Conv2D(28, 1)(x_in)  # 256 KiB in, 1.75 MiB out
    x = tf.keras.layers.GlobalAveragePooling2D()(x)
    samples = np.random.default_rng(2).uniform(-1, 1, (2, 1, 256, 256, 4)).astype(np.float32)
    conv = tf.lite.TFLiteConverter.from_keras_model(tf.keras.Model(x_in, x))
    conv.optimizations = [tf.lite.Optimize.DEFAULT]
    conv.representative_dataset = lambda: ([s] for s in samples)
    conv.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    conv.inference_input_type = conv.inference_output_type = tf.int8
    with quiet():
        (tmp_path / "m.tflite").write_bytes(conv.convert())
    assert api.compile_model(api.load_model(tmp_path / "m.tflite")).arena_size == 256 * 256 * 32
    for boot in BOOT_MODES:  # the first span that holds it, in both modes
        place = api.plan_memory(tmp_path / "m.tflite", BOARDS[0], boot=boot).board.placement
        assert (place["arena"], place["code"], place["stack"]) == ("AXISRAM_TOP", "IMAGE", "FLEXMEM"), boot


@pytest.mark.tf
@pytest.mark.cross
def test_build_links_the_arena_across_axisram1_6(big_arena_model, tmp_path, capsys):
    """Head training of the 2.46 MB-arena model cross-compiles and links (warnings are errors in
    the port's Makefile): link.ld declares the span, the arena lies in it, the image in FLEXMEM."""
    import subprocess

    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (40, 224, 224, 3), dtype=np.int8)
    y = rng.integers(0, 10, 40)
    np.savez(tmp_path / "d.npz", x_train=x[:24], y_train=y[:24], x_test=x[24:], y_test=y[24:])
    out = tmp_path / "b"
    args = ["build", "--board", "stm32n6", "--model", str(big_arena_model), "--data", str(tmp_path / "d.npz")]
    assert main([*args, "--steps", "3", "--out", str(out)]) == 0
    report = capsys.readouterr().out
    assert re.search(r"region  AXISRAM1_6 \(ram, 3522560 bytes at 0x34064000, spanning AXISRAM1 \+ ", report)
    assert "AXISRAM1_6 (rwx) : ORIGIN = 0x34064000, LENGTH = 0x35C000" in (out / "link.ld").read_text()
    nm = subprocess.run(["arm-none-eabi-nm", str(out / "build" / "big_arena.elf")], capture_output=True, text=True)
    symbols = {line.split()[-1]: int(line.split()[0], 16) for line in nm.stdout.splitlines() if len(line.split()) == 3}
    assert symbols["__zo_arena_start"] >= 0x3406_4000 and symbols["__zo_arena_end"] <= 0x343C_0000
    assert symbols["__zo_arena_end"] - symbols["__zo_arena_start"] >= BIG_ARENA
    assert 0x3400_0000 <= symbols["zo_reset_handler"] < 0x3406_4000  # the code in FLEXMEM


@pytest.mark.zoo
@pytest.mark.parametrize("board", BOARDS)
def test_ml_zoo_mobilenet_v2_1_0_224(board):
    """Arm ML-zoo models/image_classification/mobilenet_v2_1.0_224/tflite_int8 (Apache-2.0): its
    inference plan fits in both boot modes, weights read in place from the NOR."""
    if not ML_ZOO_MBV2.is_file():
        pytest.skip(
            f"{ML_ZOO_MBV2.name} is absent: it is a Git LFS object of ARM-software/ML-zoo "
            f"(sha256 bd8d56b8..., 4020936 bytes); put it in {PUBLIC} to plan it"
        )
    for boot in BOOT_MODES:
        plan = api.plan_memory(ML_ZOO_MBV2, board, boot=boot)
        assert plan.board.region_of("weights").kind == "flash"
        assert all(u.used <= u.region.size for u in plan.regions)
