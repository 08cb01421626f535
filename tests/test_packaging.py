"""The wheel others install: the README's build command, run once, and what it makes.

The command in the README's "Building wheels" section (``maturin build --release
--sdist --zig --compatibility manylinux_2_17``) builds the sdist, unpacks it and
builds the wheel from it, so one build shows that the sdist builds and that the
wheel is manylinux. The build runs once per session (a few minutes on 2 cores)
with maturin and ziglang from PyPI in a virtualenv of its own; every test here
reads its output. The wheel is then installed, alone and without an index, into
a fresh virtualenv whose ``jmsstore demo`` must run.

``JMSSTORE_LONG=1`` also installs the sdist with pip into a fresh virtualenv
(pip's PEP 517 path: a second build of the crate).

The tests skip, saying why, only when PyPI cannot be reached to fetch maturin
and ziglang; a failed build, install or demo fails.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
LONG = bool(os.environ.get("JMSSTORE_LONG"))
PIP_TIMEOUT = 10 * 60
BUILD_TIMEOUT = 40 * 60  # a full release build with LTO on 2 shared cores, waiting for target/'s lock
RUN_TIMEOUT = 5 * 60
# The unstripped library (release profile, debug = 1) is about 25 MB; stripped, about 3 MB.
MAX_LIBRARY_BYTES = 8 << 20
NO_NETWORK = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "Name or service not known",
    "ConnectTimeoutError",
    "ProxyError",
)


def run(
    cmd: list[str], timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd, env=env)


def report(proc: subprocess.CompletedProcess[str]) -> str:
    out, err = proc.stdout[-8000:], proc.stderr[-8000:]
    return f"{shlex.join(proc.args)}: exit {proc.returncode}\n--- stdout ---\n{out}\n--- stderr ---\n{err}"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without this interpreter's virtualenv or import path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(extra)
    return env


def make_venv(path: Path) -> Path:
    """A fresh virtualenv with pip; returns its bin directory."""
    proc = run([sys.executable, "-m", "venv", str(path)], timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, report(proc)
    return path / "bin"


def pip_install(bin_dir: Path, *args: str) -> None:
    cmd = [str(bin_dir / "python"), "-m", "pip", "install", "--disable-pip-version-check", "--retries", "2", *args]
    proc = run(cmd, timeout=PIP_TIMEOUT, env=clean_env())
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and any(marker in output for marker in NO_NETWORK):
        why = next(line for line in output.splitlines() if any(marker in line for marker in NO_NETWORK))
        pytest.skip(f"PyPI cannot be reached to install {' '.join(args)}: {why.strip()}")
    assert proc.returncode == 0, report(proc)


def readme_build_command() -> list[str]:
    """The maturin command of the README's "Building wheels" section, as argv."""
    section = (ROOT / "README.md").read_text().split("## Building wheels", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.+?)\n```", section, flags=re.DOTALL)
    assert blocks, "the README's Building wheels section has no sh block"
    steps = [step.strip() for step in blocks[0].split("&&")]
    build = [shlex.split(step) for step in steps if step.startswith("maturin build")]
    assert len(build) == 1, steps
    return build[0]


@dataclass
class Dist:
    wheel: Path
    sdist: Path
    build_log: str
    tools: Path  # bin directory of the virtualenv with maturin, ziglang and auditwheel


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dist]:
    """Runs the README's build command once: the sdist, and the manylinux wheel built from it."""
    if shutil.which("cargo") is None:
        pytest.fail("cargo is not on PATH: the wheel needs a Rust toolchain (README, Quick start)", pytrace=False)
    base = tmp_path_factory.mktemp("packaging")
    tools = make_venv(base / "tools")
    pip_install(tools, "maturin[zig]>=1.9.3,<2", "auditwheel>=6")

    argv = readme_build_command()
    out = argv.index("--out")
    argv[out + 1] = str(base / "dist")
    # target/ of the checkout, so that a second run rebuilds only the workspace crates.
    env = clean_env(PATH=f"{tools}{os.pathsep}{os.environ['PATH']}", CARGO_TARGET_DIR=str(ROOT / "target"))
    proc = run([str(tools / argv[0]), *argv[1:]], timeout=BUILD_TIMEOUT, cwd=ROOT, env=env)
    assert proc.returncode == 0, report(proc)
    wheels = sorted((base / "dist").glob("*.whl"))
    sdists = sorted((base / "dist").glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, sorted(p.name for p in (base / "dist").iterdir())
    yield Dist(wheels[0], sdists[0], proc.stdout + proc.stderr, tools)
    shutil.rmtree(tools.parent, ignore_errors=True)  # ziglang is about 400 MB


@pytest.fixture(scope="session")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed from the file alone (no index); its bin directory."""
    bin_dir = make_venv(tmp_path_factory.mktemp("wheel-venv") / "venv")
    pip_install(bin_dir, "--no-index", str(dist.wheel))
    return bin_dir


def elf_sections(data: bytes) -> dict[str, int]:
    """Section name -> size of a little-endian ELF64 file."""
    assert data[:6] == b"\x7fELF\x02\x01", "not a little-endian ELF64 file"
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:
        name, _type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        return name, offset, size

    _, names_at, _ = header(shstrndx)
    sections = {}
    for i in range(shnum):
        name, _, size = header(i)
        end = data.index(b"\0", names_at + name)
        sections[data[names_at + name : end].decode()] = size
    return sections


def wheel_library(wheel: Path) -> tuple[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        libs = [n for n in zf.namelist() if n.startswith("jmsstore/_native") and n.endswith(".so")]
        assert len(libs) == 1, zf.namelist()
        return libs[0], zf.read(libs[0])


def test_the_wheel_is_manylinux(dist: Dist) -> None:
    # name-version-python-abi-platform.whl; the platform may be a compressed set "a.b"
    _, _, python, abi, platform = dist.wheel.name.removesuffix(".whl").split("-")
    assert (python, abi) == ("cp311", "abi3"), dist.wheel.name
    platforms = platform.split(".")
    assert "manylinux_2_17_x86_64" in platforms, dist.wheel.name
    assert all(p.startswith("manylinux") for p in platforms), dist.wheel.name
    with zipfile.ZipFile(dist.wheel) as zf:
        wheel_meta = zf.read("jmsstore-0.1.0.dist-info/WHEEL").decode()
    assert "Tag: cp311-abi3-manylinux_2_17_x86_64" in wheel_meta, wheel_meta
    assert "linux_x86_64" not in re.sub(r"manylinux\w*_x86_64", "", wheel_meta), wheel_meta
    # auditwheel reads the library's symbol versions and libraries itself
    proc = run([str(dist.tools / "auditwheel"), "show", str(dist.wheel)], timeout=RUN_TIMEOUT)
    assert proc.returncode == 0, report(proc)
    shown = " ".join(proc.stdout.split())
    assert re.search(r'consistent with the following platform tag: "?manylinux_2_17_x86_64', shown), proc.stdout


def test_the_native_library_is_stripped(dist: Dist) -> None:
    name, data = wheel_library(dist.wheel)
    sections = elf_sections(data)
    assert not [s for s in sections if s.startswith(".debug")], f"{name} keeps debug info: {sorted(sections)}"
    assert ".symtab" not in sections, f"{name} keeps its symbol table"
    assert ".dynsym" in sections  # Python finds PyInit__native there
    assert len(data) < MAX_LIBRARY_BYTES, f"{name} is {len(data):,} bytes"


def test_the_wheel_carries_the_license(dist: Dist) -> None:
    with zipfile.ZipFile(dist.wheel) as zf:
        metadata = zf.read("jmsstore-0.1.0.dist-info/METADATA").decode()
        license_text = zf.read("jmsstore-0.1.0.dist-info/licenses/LICENSE").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines(), metadata[:2000]
    assert "License-File: LICENSE" in metadata.splitlines(), metadata[:2000]
    assert license_text == (ROOT / "LICENSE").read_text()


def test_the_sdist_builds_the_wheel(dist: Dist) -> None:
    # --sdist builds the wheel from the unpacked sdist, not from the checkout
    assert "Building wheels from source distribution" in dist.build_log, dist.build_log[-4000:]
    with tarfile.open(dist.sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
        pkg_info = tf.extractfile(f"{dist.sdist.name.removesuffix('.tar.gz')}/PKG-INFO")
        assert pkg_info is not None
        metadata = pkg_info.read().decode()
    for needed in (
        "LICENSE",
        "pyproject.toml",
        "Cargo.toml",
        "Cargo.lock",
        "rust/jmsstore-core/Cargo.toml",
        "rust/jmsstore-core/src/lib.rs",
        "rust/jmsstore-py/Cargo.toml",
        "rust/jmsstore-py/src/lib.rs",
        "python/jmsstore/__init__.py",
        "python/jmsstore/_native.pyi",
        "python/jmsstore/py.typed",
    ):
        assert needed in names, f"{needed} is not in {dist.sdist.name}"
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def test_the_installed_wheel_runs_the_demo(installed: Path, tmp_path: Path) -> None:
    env = clean_env()
    # cwd away from the checkout: jmsstore must come from the virtualenv
    where = run(
        [str(installed / "python"), "-c", "import jmsstore; print(jmsstore.__file__)"],
        RUN_TIMEOUT,
        cwd=tmp_path,
        env=env,
    )
    assert where.returncode == 0, report(where)
    assert Path(where.stdout.strip()).is_relative_to(installed.parent), where.stdout

    home = tmp_path / "demo"
    demo = run([str(installed / "jmsstore"), "demo", "--dir", str(home)], RUN_TIMEOUT, cwd=tmp_path, env=env)
    assert demo.returncode == 0, report(demo)
    assert "restarted (recovery)" in demo.stdout, demo.stdout
    verify = run(
        [str(installed / "jmsstore"), "store", "verify", str(home / "store")], RUN_TIMEOUT, cwd=tmp_path, env=env
    )
    assert verify.returncode == 0, report(verify)


@pytest.mark.skipif(not LONG, reason="JMSSTORE_LONG=1 installs the sdist with pip (a second build)")
def test_pip_installs_the_sdist(dist: Dist, tmp_path: Path) -> None:
    bin_dir = make_venv(tmp_path / "venv")
    pip_install(bin_dir, str(dist.sdist))
    proc = run(
        [str(bin_dir / "jmsstore"), "demo", "--dir", str(tmp_path / "demo")], RUN_TIMEOUT, cwd=tmp_path, env=clean_env()
    )
    assert proc.returncode == 0, report(proc)


def test_the_license_is_declared_alike_everywhere() -> None:
    def toml(path: str) -> dict[str, object]:
        return tomllib.loads((ROOT / path).read_text())

    assert toml("pyproject.toml")["project"]["license"] == "Apache-2.0"  # type: ignore[index]
    assert toml("spark_loader/pyproject.toml")["project"]["license"] == "Apache-2.0"  # type: ignore[index]
    assert toml("Cargo.toml")["workspace"]["package"]["license"] == "Apache-2.0"  # type: ignore[index]
    for crate in ("rust/jmsstore-core/Cargo.toml", "rust/jmsstore-py/Cargo.toml"):
        assert toml(crate)["package"]["license"] == {"workspace": True}, crate  # type: ignore[index]
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in license_text
    assert (ROOT / "spark_loader" / "LICENSE").read_text() == license_text  # its wheel carries a copy
