"""Run a grid of independent runs through a concurrent.futures-style executor, with an on-disk cache.

    executor = make_executor(workers=2)                  # local processes
    executor = make_executor(cluster="tcp://HOST:8786")  # a Dask distributed scheduler
    results = run_grid(specs, run_one, executor, cache_dir)

Every run is a plain dict of options (`spec`) handed to a module-level function; its result is a
JSON-able dict. A result is cached as `cache_dir/<hash>.json`, the hash covering the spec, the
bytes of the files it names (`spec["model"]`, `spec["data"]`) and the zoflash version (its version
string and a digest of its sources and firmware templates), so a re-run skips finished runs and
a changed model, data set or trainer reruns everything it affects. The executor only decides
where a run happens: the results are the same either way (the runs are seeded and the host
simulation is deterministic).

Dask workers need zoflash installed and the model and data files at the same paths (a shared
checkout); the run function is shipped to them by value.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import json
import pickle
import sys
import time
from collections.abc import Callable
from pathlib import Path

_FILE_KEYS = ("model", "data")
_file_digests: dict[str, str] = {}
_version: str | None = None


def _digest_file(path: str) -> str:
    if path not in _file_digests:
        _file_digests[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return _file_digests[path]


def zoflash_version() -> str:
    """The version string plus a digest of the package sources and firmware templates."""
    global _version
    if _version is None:
        import zoflash

        pkg = Path(zoflash.__file__).resolve().parent
        h = hashlib.sha256()
        roots = [pkg, pkg.parent.parent / "firmware_templates"]
        for root in roots:
            for f in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".c", ".h", ".j2")):
                h.update(str(f.relative_to(root)).encode())
                h.update(f.read_bytes())
        _version = f"{zoflash.__version__}+{h.hexdigest()[:16]}"
    return _version


def run_hash(spec: dict) -> str:
    """A stable hash of everything a run's result depends on."""
    body = {k: v for k, v in spec.items() if k not in _FILE_KEYS}
    body.update({f"{k}_sha256": _digest_file(str(spec[k])) for k in _FILE_KEYS if k in spec})
    body["zoflash"] = zoflash_version()
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]


def make_executor(workers: int = 2, cluster: str | None = None) -> cf.Executor:
    """Local worker processes, or the executor of a Dask distributed client connected to `cluster`."""
    if cluster is None:
        return cf.ProcessPoolExecutor(workers)
    try:
        from distributed import Client
    except ImportError as e:
        raise SystemExit("--cluster needs dask[distributed]: pip install -e '.[sweep]'") from e
    return Client(cluster).get_executor()


def ship_by_value(fn: Callable) -> None:
    """Let Dask workers run `fn` without importing its module (a benchmarks/ script, not a package)."""
    import cloudpickle

    if fn.__module__ != "__main__":  # __main__ is pickled by value already
        cloudpickle.register_pickle_by_value(sys.modules[fn.__module__])


class CallOnLoad:
    """fn(spec), pickled as the call itself: `pickle.loads` of its bytes runs it.  A standalone Dask
    scheduler unpickles the tasks it is sent, and cannot import a benchmarks/ script (a module other
    than __main__, such as experiments for heldout.py), so the tasks it sees are `pickle.loads` of
    bytes; the workers unpickle, which runs the function shipped by value."""

    def __init__(self, fn: Callable[[dict], dict], spec: dict):
        self.fn, self.spec = fn, spec

    def __reduce__(self):
        return self.fn, (self.spec,)


def as_call(fn: Callable[[dict], dict], spec: dict) -> bytes:
    import cloudpickle

    return cloudpickle.dumps(CallOnLoad(fn, spec))


def run_grid(
    specs: list[dict],
    fn: Callable[[dict], dict],
    executor: cf.Executor,
    cache_dir: Path,
    progress: Callable[[str], None] = print,
) -> dict[str, dict]:
    """Run every spec not yet in the cache; return {spec["key"]: result} for all of them."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    unique = {s["key"]: s for s in specs}
    results: dict[str, dict] = {}
    todo: dict[str, tuple[dict, Path]] = {}
    for key, spec in unique.items():
        path = cache_dir / f"{run_hash(spec)}.json"
        if path.exists():
            results[key] = json.loads(path.read_text())
        else:
            todo[key] = (spec, path)
    progress(f"  {len(unique)} runs: {len(results)} cached, {len(todo)} to run")
    if not todo:
        return results
    t0 = time.perf_counter()
    if isinstance(executor, cf.ProcessPoolExecutor):
        futures = {executor.submit(fn, spec): key for key, (spec, _) in todo.items()}
    else:  # a Dask scheduler process has only bytes to carry: see CallOnLoad
        ship_by_value(fn)
        futures = {executor.submit(pickle.loads, as_call(fn, spec)): key for key, (spec, _) in todo.items()}
    for n, fut in enumerate(cf.as_completed(futures), 1):
        key = futures[fut]
        result = fut.result()
        todo[key][1].write_text(json.dumps(result))
        results[key] = result
        elapsed = time.perf_counter() - t0
        if n % 10 == 0 or n == len(todo):
            eta = elapsed / n * (len(todo) - n)
            progress(f"  {n}/{len(todo)} runs done ({elapsed:.0f} s, about {eta:.0f} s left)")
    return results
