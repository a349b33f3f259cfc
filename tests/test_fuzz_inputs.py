"""Seeded mutation fuzzers for the inputs users give besides models (test_bad_models.py fuzzes those):
datasets, telemetry bytes, zoflash.toml project files, board files and command lines. Each mutant
ends in success or in one `error:` message: never a traceback, a hang or a silent wrong answer.

The count of mutants is --fuzz-count N or ZOFLASH_FUZZ_COUNT (a nightly run sets a larger one); the
defaults keep all of them to about a minute. A failure names the mutant: rerun with the same count
to reproduce it (the seed is fixed)."""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES, ROOT

from zoflash.cli.main import main
from zoflash.errors import ZoflashError
from zoflash.monitor import telemetry
from zoflash.monitor.live_view import LiveView
from zoflash.monitor.session import Session, read_log

sys.path.insert(0, str(Path(__file__).parent))
import mutants  # noqa: E402  (the tests' own helper module, beside this file)

FUZZ_SEED = 20261205
MUTANT_SECONDS = 60  # one mutant's run (tiny trainings of small models): longer is a hang

# (model, dataset, extra simulate arguments): small models with their own data
PAIRS = {
    "binary_shift.npz": (FIXTURES / "binary_clf.tflite", []),
    "digits_shift.npz": (FIXTURES / "digits_cnn.tflite", []),
    "regress_shift.npz": (FIXTURES / "regressor.tflite", ["--loss", "mse"]),
}
DATASETS = [FIXTURES / n for n in PAIRS] + [ROOT / "examples" / "digits_shift.npz"]


def fuzz_count(request, default: int) -> int:
    """--fuzz-count N, or ZOFLASH_FUZZ_COUNT, else this fuzzer's default."""
    return int(request.config.getoption("--fuzz-count") or os.environ.get("ZOFLASH_FUZZ_COUNT") or default)


class _Hang(BaseException):  # BaseException: product code catching Exception cannot swallow it
    pass


@contextlib.contextmanager
def deadline(seconds: float):
    """Raise _Hang in the main thread after `seconds`."""

    def expired(signum, frame):
        raise _Hang

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def run_cli(argv: list[str], capsys) -> tuple[int | None, str, str]:
    """`zoflash argv` in this process: (exit code, stdout, stderr); the exit code is None and stderr
    the exception's place and words when an exception escapes main, or when it does not answer."""
    capsys.readouterr()
    try:  # numpy's overflow and invalid-value warnings are errors: a silently wrong number otherwise
        with deadline(MUTANT_SECONDS), warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            code = main(argv)
    except _Hang:
        return None, "", f"no answer within {MUTANT_SECONDS} s"
    except BaseException as exc:  # noqa: BLE001  (what escapes main is the finding)
        where = traceback.extract_tb(exc.__traceback__)[-1]
        out = capsys.readouterr()
        return None, out.out, f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
    out = capsys.readouterr()
    return code, out.out, out.err


def one_message(code: int | None, err: str) -> str | None:
    """None when a failed run said why in one `error:` paragraph; else what is wrong with its ending."""
    if code is None:
        return err
    if "Traceback" in err:
        return f"exit {code} with a traceback: {err.strip()[-600:]}"
    said = [line for line in err.splitlines() if line.lower().startswith("error:")]
    if code != 0 and len(said) != 1:
        return f"exit {code} with {len(said)} error lines: {err.strip()[-600:]}"
    return None


def complete_log(path: Path) -> str | None:
    """None when the log of a successful run holds its hello, an evaluation and its done record."""
    if not path.is_file():
        return f"exit 0 but no log at {path}"
    kinds = {r["type"] for r in read_log(path)}
    missing = {"hello", "eval", "done"} - kinds
    return f"exit 0 but the log lacks {sorted(missing)}" if missing else None


# ------------------------------------------------------------------- datasets


def test_dataset_mutants_end_in_one_message_or_a_complete_run(request, tmp_path, monkeypatch, capsys):
    """Mutated datasets (keys dropped or renamed; object, complex, bool, string arrays; other ranks
    and sizes; NaN, infinity, huge values; empty splits, one sample; labels out of range; damaged
    zip files) through `zoflash simulate` (the Python reference engine) and `build --data
    --no-compile`, as a user runs them."""
    monkeypatch.chdir(tmp_path)  # no zoflash.toml of the caller's
    failures = []
    for n, (source, data, what) in enumerate(mutants.dataset_mutants(DATASETS, fuzz_count(request, 60), FUZZ_SEED)):
        path = tmp_path / f"mutant{n}.npz"
        path.write_bytes(data)
        model, extra = PAIRS[source.name]
        label = f"mutant {n} of {source.name} ({what})"
        log = tmp_path / f"run{n}.jsonl"
        if n % 4 == 3:
            argv = [
                "build",
                "--model",
                str(model),
                "--data",
                str(path),
                "--out",
                str(tmp_path / f"b{n}"),
                "--no-compile",
            ]
        else:
            argv = ["simulate", "--model", str(model), "--data", str(path), "--engine", "reference"]
            argv += ["--steps", "2", "--eval-every", "1", "--no-plot", "--log", str(log), "--force"]
        code, _, err = run_cli([*argv, *extra], capsys)
        problem = one_message(code, err)
        if problem is None and code == 0:
            problem = complete_log(log) if argv[0] == "simulate" else None
            if argv[0] == "build" and not (tmp_path / f"b{n}" / "manifest.json").is_file():
                problem = "exit 0 but no bundle"
        if problem:
            failures.append(f"{label}: {problem}")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------- telemetry bytes


@pytest.fixture(scope="module")
def recorded_stream(tmp_path_factory):
    """The raw telemetry chunks of a real run (the reference trainer's frames, as simulate feeds
    them to its Session), device text lines between them, the run's log and its weights file."""
    tmp = tmp_path_factory.mktemp("stream")
    chunks: list[bytes] = []
    feed = Session.feed

    def recording(self, data):
        chunks.append(bytes(data))
        return feed(self, data)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Session, "feed", recording)
        # digits_cnn: weights of several chunks, so that a lost chunk leaves a hole
        argv = ["-q", "simulate", "--model", str(FIXTURES / "digits_cnn.tflite")]
        argv += ["--data", str(FIXTURES / "digits_shift.npz"), "--engine", "reference", "--steps", "6"]
        argv += ["--eval-every", "2", "--no-plot", "--log", str(tmp / "run.jsonl")]
        assert main(argv) == 0
    # what a board prints besides its frames: text lines, one cut mid-line by a frame
    chunks[1:1] = [b"boot: zoflash training\r\n", "caf\u00e9 ready\n".encode()]
    chunks.insert(len(chunks) // 2, b"partial line ")
    weights = np.load(tmp / "run.weights.npz", allow_pickle=False)
    tensors = [
        dict(index=int(k[1:]), name=k, dtype=str(weights[k].dtype), shape=list(weights[k].shape))
        for k in weights.files
        if k.startswith("t")
    ]
    return chunks, read_log(tmp / "run.jsonl"), tensors


def _decode(data: bytes, pieces: list[bytes]) -> tuple[list, dict]:
    dec = telemetry.Decoder()
    items = [it for piece in pieces for it in dec.feed(piece)] + dec.flush()
    assert b"".join(pieces) == data
    return items, dec.stats()


def _account(data: bytes, items: list, stats: dict) -> str | None:
    """None when every byte is in a frame with a good CRC, a text line, or counted as dropped."""
    pos, frame_bytes = 0, 0
    for it in items:
        if isinstance(it, telemetry.TextLine):
            continue
        raw = it.to_bytes()  # the frame as sent, its CRC computed afresh
        found = data.find(raw, pos)
        if found < 0:
            return f"a frame (type {it.type}, seq {it.seq}) not in the stream as sent: a bad CRC let through"
        pos, frame_bytes = found + len(raw), frame_bytes + len(raw)
    if frame_bytes + stats["text_bytes"] + stats["dropped_bytes"] != len(data):
        return f"{len(data)} bytes in, {frame_bytes} in frames + {stats} do not add up"
    if stats["frames"] != sum(not isinstance(it, telemetry.TextLine) for it in items):
        return f"frames counter {stats['frames']} for {len(items)} items"
    return None


def test_telemetry_mutants_never_raise_and_account_for_every_byte(request, recorded_stream, tmp_path):
    """Mutated recordings of a real run's stream (bit flips, truncation, duplication, random bytes,
    chunks swapped or lost) through the decoder in one piece, byte by byte and in random chunks,
    and through the session layer (its JSONL log, live view and weights): no exception, no hang,
    the same items whatever the chunking, only frames with a good CRC, every byte accounted for."""
    chunks, logged, tensors = recorded_stream
    clean = b"".join(chunks)
    rng = random.Random(FUZZ_SEED)
    # the clean stream: the same records in any chunking, and the session logs what the run logged
    whole, stats = _decode(clean, [clean])
    assert (
        stats["crc_errors"] == stats["dropped_bytes"] == stats["truncated"] == 0
        and _account(clean, whole, stats) is None
    )
    assert _decode(clean, [clean[k : k + 1] for k in range(len(clean))])[0] == whole
    assert _decode(clean, mutants.random_chunks(clean, rng))[0] == whole
    session = Session(tmp_path / "clean.jsonl", LiveView(out=io.StringIO()))
    for piece in mutants.random_chunks(clean, rng):
        session.feed(piece)
    session.close()
    texts = [r for r in read_log(tmp_path / "clean.jsonl") if r["type"] == "text"]
    assert [r for r in read_log(tmp_path / "clean.jsonl") if r["type"] != "text"] == logged
    assert [t["text"] for t in texts] == ["boot: zoflash training", "caf\u00e9 ready", "partial line "]
    assert [a.shape for _, _, a, _ in session.trained_arrays(tensors)] == [tuple(t["shape"]) for t in tensors]

    failures = []
    for n, (data, what) in enumerate(mutants.stream_mutants(chunks, fuzz_count(request, 300), FUZZ_SEED)):
        label = f"stream mutant {n} ({what})"
        started = time.monotonic()
        try:
            with deadline(MUTANT_SECONDS):
                items, stats = _decode(data, [data])
                problem = _account(data, items, stats)
                for pieces in (
                    [data[k : k + 1] for k in range(len(data))] if n % 10 == 0 else [],
                    mutants.random_chunks(data, rng),
                ):
                    if pieces and _decode(data, pieces) != (items, stats):
                        problem = problem or "other items or counters when fed in other chunks"
                session = Session(tmp_path / f"m{n}.jsonl", LiveView(out=io.StringIO()))
                for piece in mutants.random_chunks(data, rng):
                    session.feed(piece)
                result = session.close()
                if result.stats != stats:
                    problem = problem or f"the session counted {result.stats}, the decoder {stats}"
                logged_now = read_log(tmp_path / f"m{n}.jsonl")
                if len(logged_now) != sum(r["type"] not in ("weights", "checkpoint") for r in result.records):
                    problem = problem or "the log does not hold every record"
                try:
                    session.trained_arrays(tensors)
                    session.best_arrays(tensors)
                except ZoflashError as exc:
                    if "\n" in str(exc):
                        problem = problem or f"a message of several lines: {exc}"
        except _Hang:
            problem = f"no answer within {MUTANT_SECONDS} s"
        except Exception as exc:  # noqa: BLE001  (the finding)
            where = traceback.extract_tb(exc.__traceback__)[-1]
            problem = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
        if problem:
            failures.append(f"{label}: {problem} [{time.monotonic() - started:.1f} s]")
    assert not failures, "\n".join(failures[:30])


# ------------------------------------------------------------------- zoflash.toml

PROJECT_FILES = [
    '[train]\nbatch = 8\nseed = 3\nscheduler = "plateau"\neval_every = 1\nlr_decay = "none"\n'
    "val_fraction = 0.1\nguard_sat = 0.5\n\n[train.sched]\ntau = 0.02\npatience = 3\n\n"
    '[build]\nboot = "dev"\n',
    '[train]\ntrain = "last:1"\nrounding = "nearest"\nq = 2\nq_max = 8\nlr = 0.01\nheadroom = "auto"\n'
    'loss = "sigmoid-bce"\n\n[build]\ndevice_headers = []\n',
]


def _project_keys() -> dict[str, list[str]]:
    from zoflash.spec import options as table
    from zoflash.spec import training as spec
    from zoflash.targets.build_options import BUILD_KEYS

    sched = sorted({k for params in spec.SCHED_DEFAULTS.values() for k in params})
    return {"train": [n for n in table.OPTION_NAMES if n != "sched"], "train.sched": sched, "build": list(BUILD_KEYS)}


def test_project_file_mutants_end_in_one_message_naming_the_file(request, tmp_path, monkeypatch, capsys):
    """Mutated zoflash.toml files ([train], [train.sched], [build]: keys unknown or of another type,
    values out of range, tables renamed, broken syntax, a huge file, bytes not UTF-8) given with
    --config to `simulate` and `build --data --no-compile`: a run, or one message that names the
    file and, for a key's value, the key."""
    monkeypatch.chdir(tmp_path)
    known = _project_keys()
    failures = []
    count = fuzz_count(request, 60)
    for n, (i, data, what, key) in enumerate(mutants.toml_mutants(PROJECT_FILES, count, FUZZ_SEED, known)):
        path = tmp_path / f"project{n}.toml"
        path.write_bytes(data)
        label = f"project file mutant {n} of file {i} ({what})"
        model, dataset = FIXTURES / "binary_clf.tflite", FIXTURES / "binary_shift.npz"
        log = tmp_path / f"run{n}.jsonl"
        if n % 3 == 2:
            argv = ["build", "--model", str(model), "--data", str(dataset), "--no-compile"]
            argv += ["--out", str(tmp_path / f"b{n}"), "--config", str(path)]
        else:  # --steps 2 on the command line: a project file's length is replaced, its other keys kept
            argv = ["simulate", "--model", str(model), "--data", str(dataset), "--engine", "reference"]
            argv += ["--steps", "2", "--no-plot", "--log", str(log), "--force", "--config", str(path)]
        code, _, err = run_cli(argv, capsys)
        problem = one_message(code, err)
        if problem is None and code != 0:
            if path.name not in err:
                problem = f"the message does not name the file: {err.strip()}"
            elif key is not None and key not in err and key.replace("_", "-") not in err:
                problem = f"the message does not name the key {key}: {err.strip()}"
        elif problem is None and argv[0] == "simulate":
            problem = complete_log(log)
        if problem:
            failures.append(f"{label}: {problem}")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------- board files


def test_board_file_mutants_end_in_one_board_error_naming_the_file_and_key(request):
    """Mutated board files (the package's boards/*.toml; boards are only read from the package, so
    parse_board, which reads them, is driven directly): keys unknown or of another type, values out
    of range, tables renamed, broken syntax: a board that `zoflash boards show` describes, or one
    BoardError naming the file and, for a key's value, the key."""
    from zoflash.errors import BoardError
    from zoflash.targets.boards import _board_files, describe, parse_board

    files = sorted(_board_files().items())
    texts = [f.read_text() for _, f in files]
    known: dict[str, list[str]] = {}
    for text in texts:
        for table, keys in _toml_keys(text).items():
            known.setdefault(table, [])
            known[table] += [k for k in keys if k not in known[table]]
    failures = []
    count = fuzz_count(request, 300)
    for n, (i, data, what, key) in enumerate(mutants.toml_mutants(texts, count, FUZZ_SEED, known)):
        board_id = files[i][0]
        where = f"board file {board_id}.toml"
        label = f"board mutant {n} of {board_id}.toml ({what})"
        try:
            with deadline(MUTANT_SECONDS):
                board = parse_board(data.decode("utf-8", errors="replace"), where, expected_id=board_id)
                describe(board)
            # what the C takes as 32-bit constants must fit them (else a silently wrong firmware)
            wide = [
                k
                for k, v in (("clock_hz", board.cpu.get("clock_hz", 0)), ("irq", board.npu.get("irq", 0)))
                if v >= 2**32
            ]
            if wide:
                failures.append(f"{label}: accepted with {wide} beyond 32 bits")
            continue
        except BoardError as exc:
            text = str(exc)
            if where not in text:
                failures.append(f"{label}: the message does not name the file: {text}")
            elif (
                key is not None
                and key not in text
                and f"'{_table_of(what)}'" not in text
                and not _about_other_key(text)
            ):
                failures.append(f"{label}: the message does not name the key {key}: {text}")
        except _Hang:
            failures.append(f"{label}: no answer within {MUTANT_SECONDS} s")
        except Exception as exc:  # noqa: BLE001  (the finding)
            where_raised = traceback.extract_tb(exc.__traceback__)[-1]
            failures.append(f"{label}: {type(exc).__name__}: {exc} (at {where_raised.filename}:{where_raised.lineno})")
    assert not failures, "\n".join(failures)


def _toml_keys(text: str) -> dict[str, list[str]]:
    """table name ("" for the top level) -> its plain keys, from the lines of a TOML file."""
    out: dict[str, list[str]] = {"": []}
    table = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and not line.startswith("[["):
            table = line.strip("[]").strip()
            out.setdefault(table, [])
        elif line.startswith("[["):
            table = "-"  # an array of tables: its keys are not reachable by a [table] header
        elif "=" in line and not line.startswith("#") and table != "-":
            out.setdefault(table, []).append(line.split("=")[0].strip())
    return {k: v for k, v in out.items() if v}


def _table_of(what: str) -> str:
    """The table a mutant's description names first: "[cpu] core = 1" -> "cpu"."""
    return what[1 : what.index("]")] if what.startswith("[") else ""


def _about_other_key(text: str) -> bool:
    """A refusal about another key the mutant made invalid (a required key gone with its table)."""
    return "missing required key" in text or "unknown key" in text


# ------------------------------------------------------------------- command lines

# Options whose large values are legitimate but make a long run: drawn from small or refused values.
LONG_RUN_OPTIONS = {"steps", "budget", "calib_steps", "lr_trial", "lr_trial_horizon", "eval_every", "batch", "q",
                    "q_min", "q_max", "calib_q", "guard_steps", "checkpoint_every", "random", "baud", "buffer"}  # fmt: skip
NUMBERS = ("-1", "0", "1", "3", "", "x", "1.5", "1e3", "99999999999999999999", "\u00e9")
BIG_NUMBERS = ("65536", "2147483648", "1e308", "nan", "-inf")
TEXTS = ("", "x", "auto", "\u00e9\u4e2d", "-", "host", "mps3-an547", "a b", "0")


@pytest.fixture(scope="module")
def cli_inputs(tmp_path_factory):
    """Files and folders to give the commands: good ones and the wrong kind of each."""
    import shutil

    tmp = tmp_path_factory.mktemp("cli")
    model, data = tmp / "binary_clf.tflite", tmp / "binary_shift.npz"  # copies: outputs may be aimed at them
    shutil.copy(FIXTURES / model.name, model)
    shutil.copy(FIXTURES / data.name, data)
    argv = ["-q", "simulate", "--model", str(model), "--data", str(data), "--engine", "reference", "--steps", "2"]
    assert main([*argv, "--no-plot", "--log", str(tmp / "run.jsonl")]) == 0
    np.save(tmp / "x.npy", np.random.default_rng(0).integers(-128, 128, (3, 1, 16), dtype=np.int8))
    (tmp / "empty.bin").write_bytes(b"")
    (tmp / "text.txt").write_text("not what you think\n")
    (tmp / "folder").mkdir()
    good = dict(model=model, data=data, weights=tmp / "run.weights.npz", inputs=tmp / "x.npy")
    wrong = [tmp / "empty.bin", tmp / "text.txt", tmp / "folder", tmp / "missing" / "file", data, model]
    kept = {p: p.read_bytes() for p in [*good.values(), tmp / "empty.bin", tmp / "text.txt"]}

    def restore():
        """The files as they were: a mutant's --out may have been aimed at one of them."""
        for p, raw in kept.items():
            if p.is_dir():
                shutil.rmtree(p)
            p.write_bytes(raw)

    return good, wrong, restore


def _value(param, rng: random.Random, wrong_paths: list[Path], tmp: Path) -> list[str]:
    """A random command-line value for one click option (its flag and value, or the flag alone)."""
    import click

    flag = param.opts[-1] if param.opts[-1].startswith("--") else param.opts[0]
    if getattr(param, "is_flag", False):
        return [flag]
    if isinstance(param.type, click.Path):
        return [flag, str(rng.choice([*wrong_paths, tmp / "new" / "out.x", tmp]))]
    pool = list(NUMBERS if param.type in (click.INT, click.FLOAT) else TEXTS)
    if param.name not in LONG_RUN_OPTIONS:
        pool += BIG_NUMBERS
    if isinstance(param.type, click.Choice):
        pool += list(param.type.choices)
    if param.name == "sched_param":
        pool += ["tau=0.1", "patience=-1", "x=", "=1", "tau", "z=nan"]
    return [flag, rng.choice(pool)]


@pytest.mark.cc  # some mutants compile the model (simulate --engine c, build, infer)
@pytest.mark.tflm  # validate runs tflite-micro
def test_command_line_mutants_end_in_one_message_or_success(request, cli_inputs, tmp_path, monkeypatch, capsys):
    """Random options of simulate, build, validate, infer and export with random values (negative,
    huge, empty, non-ASCII; files that are folders, missing or of another kind) on top of a good
    command line: success, or one `error:` message; never a traceback or a hang."""
    from zoflash.cli.main import cli

    monkeypatch.chdir(tmp_path)
    good, wrong, restore = cli_inputs
    bases = {
        "simulate": ["--model", good["model"], "--data", good["data"], "--engine", "reference", "--steps", "2",
                     "--no-plot", "--log", tmp_path / "run.jsonl", "--force"],
        "build": ["--model", good["model"], "--data", good["data"], "--no-compile", "--out", tmp_path / "bundle"],
        "validate": ["--model", good["model"], "--random", "2"],
        "infer": ["--model", good["model"], "--inputs", good["inputs"], "--out", tmp_path / "y.npy"],
        "export": ["--model", good["model"], "--weights", good["weights"], "--out", tmp_path / "t.tflite"],
    }  # fmt: skip
    rng = random.Random(FUZZ_SEED)
    failures = []
    outcomes: dict[int | None, int] = {}
    for n in range(fuzz_count(request, 100)):
        name = rng.choice(sorted(bases))
        command = cli.commands[name]
        params = [p for p in command.params if p.opts[-1] not in ("--help", "--port")]  # --port: a real board
        argv = [str(a) for a in bases[name]]
        for param in rng.sample(params, rng.randint(1, 3)):
            value = _value(param, rng, wrong, tmp_path)
            if value[0] in argv and len(value) == 2 and rng.random() < 0.7:  # replace the good value
                argv[argv.index(value[0]) + 1] = value[1]
            else:
                argv += value
        label = f"command line {n}: zoflash {name} {' '.join(argv)}"
        restore()
        code, _, err = run_cli([name, *argv], capsys)
        outcomes[code] = outcomes.get(code, 0) + 1
        problem = one_message(code, err)
        if problem:
            failures.append(f"{label}: {problem}")
    assert not failures, "\n".join(failures)
    assert outcomes.get(0, 0) * 20 >= sum(outcomes.values()), f"few command lines ran to the end: {outcomes}"


# ------------------------------------------------------------------- what the fuzzers found, kept


def test_found_damaged_compressed_dataset_is_one_message(tmp_path, capsys):
    """A flipped byte inside a compressed member: zlib's error named as damage, not a traceback."""
    raw = bytearray((ROOT / "examples" / "digits_shift.npz").read_bytes())  # numpy.savez_compressed
    raw[62553], raw[42710] = 0x23, 0x80
    (tmp_path / "d.npz").write_bytes(bytes(raw))
    argv = ["simulate", "--model", str(FIXTURES / "digits_cnn.tflite"), "--data", str(tmp_path / "d.npz")]
    code, _, err = run_cli([*argv, "--engine", "reference", "--log", str(tmp_path / "r.jsonl")], capsys)
    assert code == 2 and one_message(code, err) is None
    assert "is damaged (error: Error -3" in err and "save the dataset again" in err


def test_found_empty_npy_is_one_message_not_aborted(tmp_path, capsys):
    (tmp_path / "empty.npy").write_bytes(b"")
    argv = ["infer", "--model", str(FIXTURES / "mlp.tflite"), "--inputs", str(tmp_path / "empty.npy")]
    code, _, err = run_cli([*argv, "--out", str(tmp_path / "y.npy")], capsys)
    assert (
        code == 2 and err.strip() == f"error: cannot read '{tmp_path / 'empty.npy'}' as a .npy array: the file is empty"
    )


@pytest.mark.parametrize("args", [["--random", "99999999999999999999"], ["--random", "2", "--seed", "-1"]])
def test_found_random_inputs_out_of_bounds_are_one_message(args, capsys):
    code, _, err = run_cli(["validate", "--model", str(FIXTURES / "mlp.tflite"), *args], capsys)
    assert code == 2 and one_message(code, err) is None
    assert ("give from 1 to 4194304" in err) if args[1] != "2" else ("give a seed of 0 or more" in err)


def test_found_mse_target_beyond_float32_loss_is_refused(tmp_path, capsys):
    with np.load(FIXTURES / "regress_shift.npz") as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["y_train"][5] = 1e12  # overflowed the float32 loss into inf (a silently wrong run)
    np.savez(tmp_path / "big.npz", **arrays)
    argv = ["simulate", "--model", str(FIXTURES / "regressor.tflite"), "--data", str(tmp_path / "big.npz")]
    code, _, err = run_cli(
        [*argv, "--loss", "mse", "--engine", "reference", "--log", str(tmp_path / "r.jsonl")], capsys
    )
    assert code == 2 and "holds a target of 1e+12" in err and "within +-16777216" in err


def test_found_project_file_value_out_of_range_names_the_file(tmp_path, capsys):
    (tmp_path / "p.toml").write_text("[train]\neval_every = 0\nq = 32\n")
    argv = ["simulate", "--model", str(FIXTURES / "binary_clf.tflite"), "--data", str(FIXTURES / "binary_shift.npz")]
    argv += ["--engine", "reference", "--log", str(tmp_path / "r.jsonl"), "--config", str(tmp_path / "p.toml")]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.startswith(f"error: '{tmp_path / 'p.toml'}' [train]: invalid training options:")
    assert "eval_every" in err
    # valid alone, invalid only with a flag: both named
    code, _, err = run_cli(
        [*argv[:-2], "--config", str(_write(tmp_path / "q.toml", "[train]\nq = 32\n")), "--q-max", "16"], capsys
    )
    assert code == 2 and err.startswith(f"error: '{tmp_path / 'q.toml'}' [train] and the command line: invalid")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_found_incomplete_weights_dump_is_a_data_error(recorded_stream):
    """A lost weights frame in the middle of a tensor: a hole the session reports in one message."""
    chunks, _, tensors = recorded_stream
    session, lost = Session(), 0
    for chunk in chunks:
        for item in telemetry.Decoder().feed(chunk):
            if isinstance(item, telemetry.TextLine):
                session.feed((item.text + "\n").encode())
                continue
            rec = telemetry.decode(item)
            if rec["type"] == "weights" and rec["part"] == 0 and rec["offset"] > 0 and not lost:
                lost += 1
                continue
            session.feed(item.to_bytes())
    session.close()
    assert lost == 1
    with pytest.raises(
        ZoflashError, match=r"are incomplete or of another size \(weights of tensor \d+ part 0: missing"
    ):
        session.trained_arrays(tensors)


@pytest.mark.parametrize(
    "line, words",
    [
        ("clock_hz = 32_000_000", "'clock_hz' must be a frequency in Hz from 1 to 4294967295"),
        ("irq = 56", "'irq' must be a device interrupt number from 0 to 479"),
    ],
)
def test_found_board_integers_beyond_the_c_constants_are_refused(line, words):
    from zoflash.errors import BoardError
    from zoflash.targets.boards import _board_files, parse_board

    text = _board_files()["mps3-an547"].read_text()
    assert line in text
    key = line.split(" = ")[0]
    with pytest.raises(BoardError, match=words):
        parse_board(text.replace(line, f"{key} = {2**40}"), "board file mps3-an547.toml", "mps3-an547")
