"""The shared object cache (targets/build_cache.py): the static runtime compiles once per compiler,
flags and source content; what it restores is byte-identical to what make would compile; a changed
header or flag misses; generated sources are never cached; concurrent builds share it safely; an
entry that fails its checksum, or breaks the build, is evicted and compiled again."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
from conftest import FIXTURES

from zoflash import api
from zoflash.cli import main
from zoflash.errors import BuildError
from zoflash.targets import build_cache
from zoflash.targets.build_cache import ObjectCache
from zoflash.targets.host_build import build_host


def _objects(bundle: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((bundle / "build" / "obj").glob("*.o"))}


def test_the_cache_location_and_off_switch(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "c"))
    assert build_cache.cache_root() == tmp_path / "c"
    monkeypatch.setenv("ZOFLASH_CACHE", "off")
    assert build_cache.cache_root() is None
    monkeypatch.delenv("ZOFLASH_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert build_cache.cache_root() == tmp_path / "xdg" / "zoflash"


@pytest.mark.cc
def test_a_second_model_reuses_the_runtime_objects_byte_for_byte(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "cache"))
    first = api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "a").bundle
    n_cached, _ = ObjectCache(tmp_path / "cache").usage()
    static_c = [n for n in first.manifest["static_files"] if n.endswith(".c")]
    assert 0 < n_cached < len(static_c) + 1  # zo_host_main.c includes the generated zo_bundle.h: never cached
    second = api.build(FIXTURES / "digits_cnn.tflite", "host", tmp_path / "b").bundle
    # the runtime files both bundles have are restored; only the kernels the first model did not
    # call (a bundle copies the C files of its own kernels) are compiled and stored
    own = {n for n in second.manifest["static_files"] if n.endswith(".c")} - set(static_c)
    assert own and all(n.startswith("zo_kernels_") for n in own)
    assert ObjectCache(tmp_path / "cache").usage()[0] == n_cached + len(own)
    monkeypatch.setenv("ZOFLASH_CACHE", "off")
    cold = api.build(FIXTURES / "digits_cnn.tflite", "host", tmp_path / "cold").bundle
    assert _objects(second.path) == _objects(cold.path)
    assert (second.path / "build" / "libdigits_cnn.so").read_bytes() == (
        cold.path / "build" / "libdigits_cnn.so"
    ).read_bytes()


@pytest.mark.cc
def test_a_changed_header_or_flag_is_a_miss(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "cache"))
    bundle = api.generate(FIXTURES / "mlp.tflite", "host", tmp_path / "a")
    line = build_cache.compile_line(bundle.path)
    store = ObjectCache(tmp_path / "cache")
    keys = store.keys(bundle.path, bundle.manifest, line)
    assert "zo_kernels_conv.o" in keys and "mlp.o" not in keys and "zo_host_main.o" not in keys
    header = bundle.path / "zo_fixedpoint.h"
    header.write_bytes(header.read_bytes() + b"\n/* edited */\n")
    edited = store.keys(bundle.path, bundle.manifest, line)
    assert edited["zo_kernels_conv.o"][0] != keys["zo_kernels_conv.o"][0]  # includes zo_fixedpoint.h
    assert edited["zo_rng.o"] == keys["zo_rng.o"]  # does not
    other_flags = store.keys(bundle.path, bundle.manifest, build_cache.compile_line(bundle.path, "-O0"))
    assert other_flags["zo_rng.o"][0] != keys["zo_rng.o"][0]


@pytest.mark.cc
def test_concurrent_builds_share_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "cache"))
    results, errors = {}, []

    def build(name):
        try:
            results[name] = api.build(FIXTURES / "mlp.tflite", "host", tmp_path / name).bundle
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build, args=(f"b{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    objs = [_objects(b.path) for b in results.values()]
    assert objs[0] == objs[1] == objs[2]


@pytest.mark.cc
@pytest.mark.cross
def test_cached_firmware_is_identical_to_a_cold_build(monkeypatch, tmp_path):
    data = FIXTURES / "digits_shift.npz"
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "cache"))
    api.build(FIXTURES / "digits_cnn.tflite", "mps3-an547", tmp_path / "warm-up", data_path=data)
    warm = api.build(FIXTURES / "digits_cnn.tflite", "mps3-an547", tmp_path / "warm", data_path=data)
    monkeypatch.setenv("ZOFLASH_CACHE", "off")
    cold = api.build(FIXTURES / "digits_cnn.tflite", "mps3-an547", tmp_path / "cold", data_path=data)
    assert (warm.outputs[0]).read_bytes() == (cold.outputs[0]).read_bytes()  # the ELF


def test_cache_command(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "objects" / "ab").mkdir(parents=True)
    (tmp_path / "cache" / "objects" / "ab" / "abcd.o").write_bytes(b"x" * 10)
    assert main(["cache"]) == 0
    assert "1 cached objects, 10 bytes" in capsys.readouterr().out
    assert main(["cache", "--clear"]) == 0
    assert "removed 1 cached objects" in capsys.readouterr().out
    assert ObjectCache(tmp_path / "cache").usage() == (0, 0)
    monkeypatch.setenv("ZOFLASH_CACHE", "off")
    assert main(["cache"]) == 0 and "off" in capsys.readouterr().out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / "objects").rglob("*.o"))


def _cold_objects(monkeypatch, tmp_path, model: str) -> dict[str, bytes]:
    monkeypatch.setenv("ZOFLASH_CACHE", "off")
    cold = api.build(FIXTURES / model, "host", tmp_path / "cold").bundle
    return _objects(cold.path)


@pytest.mark.cc
def test_a_flipped_byte_in_a_cached_object_is_evicted_and_compiled_again(monkeypatch, tmp_path, caplog):
    cold = _cold_objects(monkeypatch, tmp_path, "mlp.tflite")
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "cache"))
    api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "a")
    entries = _entries(tmp_path / "cache")
    victim = entries[len(entries) // 2]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="zoflash"):
        second = api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "b").bundle
    assert _objects(second.path) == cold  # what is linked is what the compiler makes
    said = [r.getMessage() for r in caplog.records if "object cache" in r.getMessage()]
    assert len(said) == 1 and str(victim) in said[0] and "compiled again" in said[0], said
    # stored afresh: the same entry, with the content its name records
    assert _entries(tmp_path / "cache") == entries and victim.name.endswith(f"-{_sha(victim)}.o")
    caplog.clear()
    with caplog.at_level("WARNING", logger="zoflash"):
        api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "c")
    assert not caplog.records  # the repaired cache is quiet


@pytest.mark.cc
def test_a_cached_object_that_breaks_the_link_is_evicted_and_the_build_recovers(monkeypatch, tmp_path, caplog):
    # An entry stored broken (its checksum matches its garbage) is only caught by the build.
    cold = _cold_objects(monkeypatch, tmp_path, "mlp.tflite")
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "cache"))
    api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "a")
    victim = _entries(tmp_path / "cache")[0]
    key = victim.name.rsplit("-", 1)[0]
    garbage = b"not an object file\n"
    victim.unlink()
    broken = victim.parent / f"{key}-{hashlib.sha256(garbage).hexdigest()}.o"
    broken.write_bytes(garbage)
    with caplog.at_level("WARNING", logger="zoflash"):
        second = api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "b").bundle
    assert _objects(second.path) == cold
    said = [r.getMessage() for r in caplog.records if "object cache" in r.getMessage()]
    assert len(said) == 1 and str(broken) in said[0] and "compiled again" in said[0], said
    assert not broken.exists() and victim.exists()  # the good object is stored under its own checksum
    api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "c")  # and later builds are fine


@pytest.mark.cc
def test_a_build_that_fails_on_its_own_keeps_the_cache(monkeypatch, tmp_path, caplog):
    monkeypatch.setenv("ZOFLASH_CACHE", str(tmp_path / "cache"))
    api.build(FIXTURES / "mlp.tflite", "host", tmp_path / "a")
    entries = _entries(tmp_path / "cache")
    bundle = api.generate(FIXTURES / "mlp.tflite", "host", tmp_path / "b")
    model_c = bundle.path / f"{bundle.prefix}.c"
    model_c.write_text(model_c.read_text() + "\nthis is not C;\n")
    with pytest.raises(BuildError, match="failed"):
        build_host(bundle)
    assert _entries(tmp_path / "cache") == entries
    assert not [r for r in caplog.records if "object cache" in r.getMessage()]


def test_an_entry_without_a_valid_checksum_name_is_a_miss(monkeypatch, tmp_path, caplog):
    store = ObjectCache(tmp_path / "cache")
    key = "ab" * 32
    folder = tmp_path / "cache" / "objects" / "ab"
    folder.mkdir(parents=True)
    (folder / f"{key}-nothex.o").write_bytes(b"x")
    good = b"an object"
    (folder / f"{key}-{hashlib.sha256(good).hexdigest()}.o").write_bytes(good)
    with caplog.at_level("WARNING", logger="zoflash"):
        assert store.lookup(key) == good
    assert not (folder / f"{key}-nothex.o").exists()
    assert "nothex" in caplog.text
