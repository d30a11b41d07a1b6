"""What bench/gpu.py needs beside torch, as wheels for a GPU machine that reaches no package registry.

A lent GPU machine holds Python 3.12 and a CUDA torch, nothing can be fetched there, and what travels to it
(the working tree and carried folders) must stay under 64 MiB. This script downloads, for CPython 3.12 on
x86-64 Linux (``--python-version`` for another), every package the table imports beside torch and torch's own
dependencies: fedsim's (numpy, pydantic, PyYAML, safetensors, rich, tensorly and SciPy, protobuf), the split
row's (transformers and what it imports) and pfl-research 0.6's (its accountants among them), at the versions
constraints.txt pins, pfl's where pfl asks for others (dp-accounting < 0.6). No torch, ever.

The wheels come to about 85 MB as downloaded, most of it numpy's and SciPy's compiled code, each file
compressed on its own. So each wheel is rewritten with its files stored (the same files and RECORD: pip installs
it as it would the original), and the stored wheels go into one xz archive, compressed as a whole:
``.whl/wheels.tar.xz``, with ``.whl/MANIFEST.txt`` naming each wheel. The script fails when the archive and
the repository's tracked files together pass 64 MiB. On the GPU machine, bench/gpu.sh unpacks the archive and
installs it offline (``pip install --no-index --no-deps --target``) before it runs the table.

    python bench/gpu_wheels.py [--out .whl] [--python-version 3.12] [--list]
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 64 * 2**20  # what may travel to the GPU machine: the working tree and the carried folders together
PACKAGES = [
    # fedsim beside torch
    "numpy==2.4.6",
    "pydantic==2.14.3",
    "pydantic-core==2.50.4",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "typing-extensions==4.16.0",
    "pyyaml==6.0.3",
    "safetensors==0.8.0",
    "rich==14.3.4",
    "markdown-it-py==4.3.0",
    "mdurl==0.1.2",
    "pygments==2.21.0",
    "tensorly==0.10.0",
    "scipy==1.17.1",
    "protobuf==6.33.6",
    # the split row's encoder
    "transformers==5.23.0",
    "huggingface-hub==1.33.0",
    "tokenizers==0.23.3",
    "regex==2026.11.19",
    "tqdm==4.70.1",
    "packaging==25.0",
    "httpx==0.28.1",
    "httpcore==1.0.9",
    "h11==0.16.0",
    "anyio==4.16.0",
    "idna==3.20",
    "certifi==2026.10.19.post1",
    "click==8.5.1",
    "accelerate==1.15.0",
    "psutil==7.2.2",
    # the adapters row's LoRA
    "peft==0.21.2",
    # pfl-research 0.6 (bench/vs_pfl.py's other side)
    "pfl==0.6.0",
    "multiprocess==0.70.19",
    "dill==0.4.1",
    "dp-accounting==0.5.1",  # pfl 0.6 asks for < 0.6; fedsim's 0.6.0 is not imported by the table
    "prv-accountant==0.2.0",
    "absl-py==2.5.1",
    "attrs==23.2.0",
]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
PLATFORMS += ["manylinux1_x86_64"]


def download(directory: Path, python_version: str) -> list[Path]:
    """Each package's wheel for the target Python, no dependencies followed (the list is the closure), and no
    constraint file of this machine's pip applied (the pins above are the constraints)."""
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    command += ["--python-version", python_version, "--implementation", "cp", "-d", str(directory)]
    command += [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run([*command, *PACKAGES], check=True, env={**os.environ, "PIP_CONSTRAINT": ""})
    wheels = sorted(directory.glob("*.whl"))
    if len(wheels) != len(PACKAGES):
        raise SystemExit(f"gpu_wheels: {len(wheels)} wheels for {len(PACKAGES)} packages")
    return wheels


def stored(wheel: Path) -> bytes:
    """``wheel`` with every file stored uncompressed: the same names, bytes and modes, so the same RECORD."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            copy = zipfile.ZipInfo(info.filename, info.date_time)
            copy.external_attr = info.external_attr
            dst.writestr(copy, src.read(info))
    return buffer.getvalue()


def pack(wheels: list[Path], archive: Path) -> None:
    """The stored wheels in one tar, xz-compressed as a whole (files of one package resemble each other)."""
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for wheel in wheels:
            data = stored(wheel)
            info = tarfile.TarInfo(wheel.name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def tracked_bytes() -> int:
    """The repository's tracked files, which travel with the archive."""
    names = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    return sum((ROOT / name).stat().st_size for name in names.decode().split("\0") if name and (ROOT / name).exists())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".whl")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument("--list", action="store_true", help="print the pinned packages and stop")
    args = parser.parse_args()
    if args.list:
        print("\n".join(PACKAGES))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-wheels-") as scratch:
        wheels = download(Path(scratch), args.python_version)
        downloaded = sum(w.stat().st_size for w in wheels)
        archive = args.out / "wheels.tar.xz"
        pack(wheels, archive)
        (args.out / "MANIFEST.txt").write_text("".join(f"{w.name}\n" for w in wheels))
    size, tree = archive.stat().st_size, tracked_bytes()
    print(
        f"{archive}: {len(wheels)} wheels, {downloaded / 2**20:.1f} MiB downloaded, {size / 2**20:.1f} MiB packed; "
        f"with the tracked files ({tree / 2**20:.1f} MiB) {(size + tree) / 2**20:.1f} of 64 MiB"
    )
    if size + tree > LIMIT:
        raise SystemExit("gpu_wheels: over the 64 MiB that may travel to the GPU machine")


if __name__ == "__main__":
    main()
