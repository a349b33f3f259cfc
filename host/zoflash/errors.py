"""The errors a user can see. Each carries text that says what is wrong and what to do.

The CLI prints `str(err)` as one paragraph and exits with `err.exit_code`; no traceback.
"""

from __future__ import annotations


class ZoflashError(Exception):
    """Base class: a problem the user can act on."""

    exit_code = 2


class ModelFormatError(ZoflashError):
    """The file is not a readable TFLite flatbuffer."""


class UnsupportedModelError(ZoflashError):
    """The model is readable but zoflash cannot compile it; lists every problem found."""

    def __init__(self, model: str, problems: list):
        self.model = model
        self.problems = list(problems)
        lines = [f"{model}: {len(self.problems)} problem(s) prevent compiling this model:"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class BoardError(ZoflashError):
    """A board file is missing or invalid."""


class ToolMissingError(ZoflashError):
    """An external program or optional package is not installed."""

    def __init__(self, tool: str, how_to_install: str):
        self.tool = tool
        super().__init__(f"'{tool}' is not available: {how_to_install}")


class BuildError(ZoflashError):
    """Compiling a bundle failed."""


class PrefixError(ZoflashError):
    """A model's C prefix cannot name its files and functions in the bundle."""


class DataError(ZoflashError):
    """Input data (arrays, files) has the wrong shape, type or content."""


class TflmError(ZoflashError):
    """The tflite-micro interpreter, the reference `validate` compares with, cannot run the model."""

    def __init__(self, model: str, how: str, last_line: str = ""):
        self.model, self.how, self.last_line = model, how, last_line
        said = f" (it said: {last_line})" if last_line else ""
        super().__init__(
            f"the tflite-micro interpreter {how} on {model}{said}; there is no reference to compare the "
            "generated C with. Check that the model runs in TensorFlow Lite Micro (its ops, their versions "
            "and the arena it needs), or report it with the model file if it does"
        )


class InternalError(ZoflashError):
    """A compiler stage produced something inconsistent: a bug in zoflash, not in the model."""

    def __init__(self, stage: str, what: str):
        self.stage = stage
        super().__init__(
            f"internal error after {stage}: {what}. This is a zoflash bug, not a problem with "
            "the model; please report it with the model file"
        )


# --------------------------------------------------------------- zoflash split


class SplitError(ZoflashError):
    """A model cannot be cut at the tensor asked for."""
