"""The registry idiom: declared once, looked up by name, an unknown name answered with the known ones."""

import pytest
from conftest import ROOT

from zoflash.errors import BoardError, ToolMissingError, ZoflashError
from zoflash.registry import Registry, UnknownName
from zoflash.targets import boards, npu
from zoflash.targets.runners import base


def test_register_and_get():
    reg: Registry[int] = Registry("widget", "see `zoflash widgets`")

    @reg.register("a")
    def a():
        return 1

    reg.add("b", 2)
    assert reg.get("a") is a and reg.get("b") == 2
    assert reg.names() == ("a", "b") and list(reg) == ["a", "b"] and len(reg) == 2 and "a" in reg


def test_unknown_name_lists_the_known_ones():
    reg: Registry[int] = Registry("widget", "see `zoflash widgets`")
    reg.add("a", 1)
    with pytest.raises(UnknownName, match=r"unknown widget 'x' \(known: a\); see `zoflash widgets`") as err:
        reg.get("x")
    assert isinstance(err.value, ZoflashError)


def test_a_name_is_declared_once():
    reg: Registry[int] = Registry("widget")
    reg.add("a", 1)
    with pytest.raises(ValueError, match="registered twice"):
        reg.add("a", 2)


# ----------------------------------------------------------------------------- flash methods
# A flash method is declared once: its Runner class (name, board-file settings, tool hints, rules).


def _an547(old: str = "", new: str = "") -> str:
    text = (ROOT / "boards" / "mps3-an547.toml").read_text()
    assert old in text, old
    return text.replace(old, new, 1)


def test_every_flash_method_declares_its_settings_and_tool_hints():
    assert set(base.RUNNERS) == {"qemu", "stm32cubeprogrammer", "pyocd", "openocd"}
    for name, runner in base.RUNNERS.items():
        assert issubclass(runner, base.Runner) and runner.method == name
        assert runner.settings and any(required for _, required in runner.settings.values()), name
        assert runner.tools and all(hint.strip() for hint in runner.tools.values()), name
    # every tool hint the runners give is what a missing tool says
    for tool, hint in base.tool_hints().items():
        assert hint in str(base._missing(tool))


def test_board_files_accept_exactly_the_registered_flash_methods():
    with pytest.raises(BoardError, match="'method' must be one of " + ", ".join(f"'{m}'" for m in base.RUNNERS)):
        boards.parse_board(_an547('method = "qemu"', 'method = "jlink"'), "board file t.toml")


def test_a_new_flash_method_is_its_runner_class_only(monkeypatch):
    monkeypatch.setattr(boards.FLASH_METHODS, "_items", dict(boards.FLASH_METHODS._items))

    @base.register
    class JLinkRunner(base.Runner):
        method = "jlink"
        settings = {"device": (str, True), "speed": (int, False)}
        needs_boot = False
        tools = {"JLinkExe": "install SEGGER's J-Link software"}

        @classmethod
        def check_entry(cls, entry, where):
            if entry.get("speed", 1) <= 0:
                raise BoardError(f"{where}: 'speed' must be positive")

    entry = '[[flash]]\nname = "jlink"\nmethod = "jlink"\ndevice = "CORTEX-M55"\n'
    board = boards.parse_board(_an547() + entry, "board file t.toml")
    assert base.runner_for(board.flash[-1]).__class__ is JLinkRunner
    with pytest.raises(BoardError, match=r"\(method jlink\): missing required key 'device'"):
        boards.parse_board(_an547() + entry.replace('device = "CORTEX-M55"\n', ""), "board file t.toml")
    with pytest.raises(BoardError, match="'speed' must be positive"):
        boards.parse_board(_an547() + entry + "speed = 0\n", "board file t.toml")
    missing = base._missing("JLinkExe")
    assert isinstance(missing, ToolMissingError) and "install SEGGER's J-Link software" in str(missing)


# ------------------------------------------------------------------------------ NPU backends


def test_board_npu_types_are_the_registered_backends():
    assert npu.BACKENDS.names() == ("ethos-u", "neural-art")
    assert npu.board_types() == ("ethos-u55", "ethos-u65", "ethos-u85", "neural-art")
    for backend in npu.BACKENDS.values():
        module = backend.load()
        assert module.BACKEND is backend  # declared in its own module
        for call in ("check", "request", "find_tools", "dry_run", "npu_sources", "reserved", "describe"):
            assert callable(getattr(module, call)), (backend.name, call)
    with pytest.raises(BoardError, match="'type' must be one of 'ethos-u55', 'ethos-u65', 'ethos-u85', 'neural-art'"):
        boards.parse_board(_an547('type = "ethos-u55"', 'type = "hexagon"'), "board file t.toml")


def test_a_new_npu_backend_declares_its_board_types(monkeypatch):
    monkeypatch.setattr(npu.BACKENDS, "_items", dict(npu.BACKENDS._items))
    npu.declare("hexagon", ("hexagon",), ("hexagon-v73",), "zoflash.targets.ethosu")
    text = _an547('type = "ethos-u55"', 'type = "hexagon"').replace(
        'configs = ["ethos-u55-128", "ethos-u55-256"]', 'configs = ["hexagon-v73"]'
    )
    assert boards.parse_board(text, "board file t.toml").npu["type"] == "hexagon"
    assert npu.backend_for("hexagon-v73").name == "hexagon"


# --------------------------------------------------------------- boards, engines, schedulers, losses


def test_boards_are_their_files_and_an_unknown_one_lists_them(tmp_path, monkeypatch):
    assert boards.board_registry().names() == ("host", "mps3-an547", "nucleo-n657x0-q", "stm32n6570-dk")
    with pytest.raises(BoardError, match=r"unknown board 'nope' \(known: host, mps3-an547, .*\); see `zoflash boards`"):
        boards.load_board("nope")
    (tmp_path / "an547-copy.toml").write_text(_an547('id = "mps3-an547"', 'id = "an547-copy"'))
    monkeypatch.setattr(boards, "_board_files", lambda: {p.stem: p for p in tmp_path.glob("*.toml")})
    assert boards.board_registry().names() == ("an547-copy",) and boards.load_board("an547-copy").id == "an547-copy"


def test_an_unknown_engine_is_refused_before_any_work():
    from zoflash.training.options import TrainOptions
    from zoflash.workflows.simulate import ENGINES, simulate

    assert ENGINES == ("c", "reference")  # the CLI's choices, the first the default
    with pytest.raises(UnknownName, match=r"unknown simulation engine 'gpu' \(known: c, reference\)"):
        simulate("no-such-model.tflite", "no-such-data.npz", TrainOptions(), engine="gpu")


def test_every_spec_scheduler_and_loss_has_its_python_behaviour_and_no_other():
    from zoflash.spec import training as spec
    from zoflash.training.losses import LOSSES
    from zoflash.training.schedulers import SCHEDULERS

    assert SCHEDULERS.names() == spec.SCHEDULERS and LOSSES.names() == spec.LOSSES
    assert [name for name, loss in LOSSES.items() if not loss.labels] == ["mse"]
    assert LOSSES.get("sigmoid-bce").refuse(3) and LOSSES.get("sigmoid-bce").refuse(1) is None
    assert LOSSES.get("softmax-ce").refuse(1) and LOSSES.get("softmax-ce").refuse(10) is None
