"""The one numba decorator of the project's kernels (the scorers' in scorers/, the dump
reader's in ingest/dumps_fast.py), and where compiled kernels are cached.

Kernels are compiled on first call (a few seconds for all of them, printed by
bench/scorer_bench.py) and cached on disk, so later processes load them in milliseconds. numba
looks for a writable cache directory in this order: ``NUMBA_CACHE_DIR`` if set, the package's
own ``__pycache__``, then the user's cache directory (``~/.cache/numba``). Where none is
writable (a read-only root filesystem with no writable home, as under the Helm chart's
``readOnlyRootFilesystem`` or the hardened systemd unit without their cache settings) numba
refuses ``cache=True`` at decoration time with a RuntimeError; the kernels then compile in
memory for each process instead of failing the import. deploy/ sets ``NUMBA_CACHE_DIR`` so the
daemon keeps the cache across restarts.

Where the process may not create executable memory (systemd's ``MemoryDenyWriteExecute=yes``,
the kernel's ``PR_SET_MDWE``, SELinux ``execmem`` denied) numba cannot JIT at all: its import
raises. A one-page probe finds that out first, and then, as with numba's own
``NUMBA_DISABLE_JIT=1``, numba is not imported at all (the library and its compiler take
~55 MB of resident memory an interpreted process has no use for; a failed import left half of
it loaded). The kernels then run as the plain Python functions they are (``COMPILED`` is False):
same code, same results, ~300x slower (bench/RESULTS.md "Interpreted kernels"), which one
node's agent (~3,000 scored columns: ~50 ms per 15 s tick) can afford and a fleet scorer cannot.

Vector width: on a CPU with AVX-512, LLVM's tuning for most Intel models (``prefer-256-bit``)
keeps the vectorized loops at 256 bits, a guard against the clock drop that 512-bit code
caused on Skylake-SP under sustained load. The scorers' kernels are short bursts every tick
(well under a millisecond), so ``wide_vector_features`` lifts that preference and they use
the full 512-bit registers: measured 10-16% more updates/s on the realistic path
(bench/RESULTS.md) and bit-identical results, since vectorizing without ``fastmath`` never
reorders a float operation. An operator who sets numba's own ``NUMBA_CPU_FEATURES`` or
``NUMBA_CPU_NAME`` keeps that choice instead.

Container images (the repository's Dockerfile) compile the kernels at build time into a cache
directory baked into the image and name it in ``NUMBA_CACHE_SEED_DIR`` (this project's
variable, not numba's; not ``DETECTOR_*``, which the config loader reads as config keys). numba
only uses a cache directory it can write, and a pod's root filesystem is read-only (the Helm
chart points ``NUMBA_CACHE_DIR`` at its /tmp emptyDir), so ``seed_cache`` copies the baked
files into ``NUMBA_CACHE_DIR`` before the first kernel call: the pod scores from its first
tick instead of compiling for tens of seconds. The cache is keyed by the CPU numba compiles
for; the image sets ``NUMBA_CPU_NAME`` (``generic`` unless built for the nodes' CPU) so that
key is the same on every node.

``error_model="numpy"``: a float division by zero gives inf/NaN as in numpy instead of raising
(and costs no check per division). No ``fastmath``: it would reorder arithmetic and drop the
NaN/inf semantics the scorers rely on.
"""

from __future__ import annotations

import mmap
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def jit_disabled(environ: Mapping[str, str]) -> bool:
    """numba's own switch ``NUMBA_DISABLE_JIT`` is on (an integer other than 0, as numba
    reads it): the kernels are to run as plain Python."""
    try:
        return int(environ.get("NUMBA_DISABLE_JIT", "0") or "0") != 0
    except ValueError:
        return False  # numba itself rejects the value when it loads; leave that to it


def executable_memory_allowed() -> bool:
    """This process may map memory writable and executable at once, as a JIT must: systemd's
    ``MemoryDenyWriteExecute=yes`` (a seccomp filter), the kernel's ``PR_SET_MDWE`` and
    SELinux's ``execmem`` denial all refuse such a mapping (a one-page probe)."""
    prot = mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC
    try:
        probe = mmap.mmap(-1, mmap.PAGESIZE, prot=prot)
    except OSError:
        return False
    probe.close()
    return True


numba: Any = None
# Where numba cannot JIT (or must not) it is not imported at all: a failed import still left
# llvmlite loaded, ~55 MB of an agent's resident memory for nothing.
if not jit_disabled(os.environ) and executable_memory_allowed():
    try:
        import numba
    except OSError:  # "cannot allocate executable memory": no JIT possible in this process
        numba = None

WIDE_VECTORS = "-prefer-256-bit"  # LLVM's tuning feature that keeps AVX-512 CPUs at 256 bits


def wide_vector_features(environ: Mapping[str, str]) -> str | None:
    """The ``NUMBA_CPU_FEATURES`` that lets numba compile with 512-bit vectors on a CPU with
    AVX-512 (the module docstring): the host's features without LLVM's 256-bit preference.
    None where numba cannot JIT, the CPU has no AVX-512 (or numba disabled AVX), or
    ``environ`` already chooses the target (``NUMBA_CPU_FEATURES`` or ``NUMBA_CPU_NAME``)."""
    if numba is None or "NUMBA_CPU_FEATURES" in environ or "NUMBA_CPU_NAME" in environ:
        return None
    features: str = numba.core.codegen.get_host_cpu_features()
    return f"{features},{WIDE_VECTORS}" if "+avx512f" in features.split(",") else None


_WIDE = wide_vector_features(os.environ)
if _WIDE is not None:  # before the first kernel compiles; numba reads it from the environment
    os.environ["NUMBA_CPU_FEATURES"] = _WIDE
    numba.core.config.reload_config()

COMPILED = numba is not None  # False: the kernels run interpreted (see the module docstring)

_OPTIONS: dict[str, Any] = {"error_model": "numpy", "nogil": True}


def keep(value: float) -> float:
    """``value`` unchanged, for the "update where observed, else keep" stores of the kernels:
    ``a[j] = new if ok else keep(old)`` with ``old = a[j]`` loaded before.

    Written as ``... else old``, LLVM sees that the else path stores back the value it loaded,
    drops that store as dead, and vectorizes what is left, a store on some lanes only, as a
    masked store (``vmaskmovpd``). AMD's Zen cores run that instruction as microcode: on a
    Zen 3 the decay pass over 15,520 columns ran 1.3-1.6x slower with it and the realistic
    path 1.03-1.10x (measured by the probe bench/masked_stores.py, in git history at 7dca920).
    Compiled, ``keep`` is LLVM's ``canonicalize``, which returns every non-signalling float bit
    for bit (-0.0 and quiet NaN included; numpy makes no signalling NaN) but is not provably the
    loaded value, so the store stays unconditional and vectorizes as a blend and a plain store.
    Interpreted (numba absent) it is the identity. Use it only where the machine code shows
    a masked store (tests/test_scorers_kernels.py counts them): in ``count_step``, whose kept
    stores compiled plainly without it, LLVM split each into two masked stores with it."""
    return value


if numba is not None:
    from llvmlite import ir as _ir  # type: ignore[import-untyped]
    from numba.extending import intrinsic, overload

    @intrinsic
    def _canonicalize(typingctx: Any, value: Any) -> Any:
        if not isinstance(value, numba.types.Float):
            return None
        width = {32: _ir.FloatType(), 64: _ir.DoubleType()}[value.bitwidth]

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            fn = builder.module.declare_intrinsic("llvm.canonicalize", [width])
            return builder.call(fn, [args[0]])

        return value(value), codegen

    @overload(keep)
    def _keep_compiled(value):  # type: ignore[no-untyped-def]  # numba matches names, not hints
        if isinstance(value, numba.types.Float):
            return lambda value: _canonicalize(value)  # type: ignore[call-arg]  # typingctx: numba
        return lambda value: value  # integers and booleans: no masked store seen for them


def jit(fn: F) -> F:
    """``numba.njit`` with the project's options, cached on disk where a cache dir is writable;
    ``fn`` itself where numba cannot JIT."""
    if numba is None:
        return fn
    try:
        return numba.njit(cache=True, **_OPTIONS)(fn)  # type: ignore[no-any-return]
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return numba.njit(cache=False, **_OPTIONS)(fn)  # type: ignore[no-any-return]


SEED_ENV = "NUMBA_CACHE_SEED_DIR"


def seed_cache(environ: Mapping[str, str]) -> int:
    """Copy the compiled-kernel cache named by ``NUMBA_CACHE_SEED_DIR`` into
    ``NUMBA_CACHE_DIR`` (the module docstring); returns the number of files copied. Files
    already there are kept (numba checks each entry against the source and the CPU itself).
    Nothing to do without both variables, when they name one directory, or where numba cannot
    JIT. Call it before the first kernel runs; OSError when the cache directory is not
    writable (the kernels then compile on first use, as without a seed)."""
    seed, target = environ.get(SEED_ENV), environ.get("NUMBA_CACHE_DIR")
    if numba is None or not seed or not target:
        return 0
    src, dst = Path(seed), Path(target)
    if not src.is_dir() or (dst.exists() and src.samefile(dst)):
        return 0
    copied = 0
    for path in sorted(src.rglob("*")):
        out = dst / path.relative_to(src)
        if path.is_file() and not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
            copied += 1
    return copied
