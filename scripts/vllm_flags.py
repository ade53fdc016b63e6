#!/usr/bin/env python3
"""Dump the flags of the real ``vllm serve`` argument parser of one vLLM version, as data.

    python3 scripts/vllm_flags.py 0.33.0                 # → components/vllm_flags/0.33.0.json
    python3 scripts/vllm_flags.py 0.23.0 --work /tmp/vf  # keep the throwaway venv there

What it does, and why:

1. A throwaway venv; ``pip download --no-deps vllm==VERSION`` from PyPI and ``pip install
   --no-deps`` of that wheel: vLLM's own code, byte for byte.
2. vLLM's pure-Python requirements from the wheel's metadata (pydantic, transformers, fastapi, …:
   what its config classes and parser import). Left out: torch and the GPU stack (torch,
   torchvision, triton, flashinfer, the nvidia-* and kernel packages: gigabytes of CUDA libraries,
   none of which the argument parser reads). ``torch`` and any other left-out module are replaced
   by an inert stand-in (:class:`_Inert`) that answers every attribute, call and subscript; vLLM's
   parser takes its flags, types, choices and defaults from its own dataclasses and ``Literal``s,
   never from torch.
3. In that venv, vLLM's platform is made the CPU one *before* the parser is built
   (``VLLM_TARGET_DEVICE=cpu`` and ``vllm.platforms._current_platform = CpuPlatform()``): building
   it on a machine without a GPU otherwise fails on platform detection.
4. ``vllm.entrypoints.common.cli_args.make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))``
   (``vllm.entrypoints.openai.cli_args`` before 0.2x) and every option string of every action:
   its type (int, float, str, bool switch, json), choices and ``nargs``.

The result is committed (``components/vllm_flags/<version>.json``); the config refuses a flag the
profile's version does not have (``components/vllm_flags/checks.py``) and the simulator refuses it too
under ``VLLM_SIM_STRICT_FLAGS`` (its copy: ``images/vllm-sim/vllm_flags.json``, ``--sim``).
"""

from __future__ import annotations

import argparse
import email
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SIM_COPY = ROOT / "images" / "vllm-sim" / "vllm_flags.json"
# Requirements the parser never needs (CUDA libraries and kernels, gigabytes): not installed.
HEAVY = re.compile(
    r"^(torch|torchvision|torchaudio|torchcodec|triton|xformers|flashinfer|nvidia|cupy|numba|tilelang|"
    r"PyNvVideoCodec|quack|tokenspeed|humming|fastsafetensors|instanttensor|apache-tvm|opencv|"
    r"compressed-tensors|depyf|xgrammar|llguidance|outlines|lm-format|mistral|ninja|zentorch|nvtx|"
    r"ray|intel|deep|cutlass|vllm-flash|flash)",
    re.I,
)
PARSER_MODULES = (
    "vllm.entrypoints.common.cli_args",
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.cli_args",
)
STUBBED_ROOTS = ("torch", "torchvision", "torchaudio", "triton", "numba", "cupy", "flashinfer", "xgrammar",
                 "llguidance", "outlines_core", "lmformatenforcer", "mistral_common", "depyf", "compressed_tensors",
                 "tilelang", "cv2", "quack", "vllm._C", "vllm._moe_C", "vllm.vllm_flash_attn",
                 "vllm.v1.executor")  # fmt: skip


# -- step 1-2: the venv (runs with any python3) --


def tables_folder() -> Path:
    """Where the project reads the tables (``components/vllm_flags/tables.py``). Asked here, not
    at import: the dump inside the throwaway venv must not find the project's folders (``ops``,
    ``tests``, ``policy``) before its own packages."""
    sys.path.insert(0, str(ROOT))
    from components.vllm_flags.tables import FLAG_TABLES

    return FLAG_TABLES


def pip(venv: Path, *args: str) -> None:
    subprocess.run([str(venv / "bin" / "pip"), "--disable-pip-version-check", *args], check=True)


def build_venv(version: str, work: Path) -> Path:
    venv = work / f"venv-{version}"
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheels = work / f"wheel-{version}"
    if not list(wheels.glob("vllm-*.whl")):
        pip(venv, "download", "-q", "--no-deps", "-d", str(wheels), f"vllm=={version}")
    wheel = sorted(wheels.glob("vllm-*.whl"))[0]
    pip(venv, "install", "-q", "--no-deps", str(wheel))
    meta = next((venv / "lib").glob("python3*/site-packages/vllm-*.dist-info/METADATA"))
    message = email.message_from_string(meta.read_text())
    wanted = [
        r.split(";")[0].strip()
        for r in message.get_all("Requires-Dist") or []
        if "extra ==" not in r and not HEAVY.match(r)
    ]
    requirements = work / f"requirements-{version}.txt"
    requirements.write_text("\n".join(wanted) + "\n")
    pip(venv, "install", "-q", "-r", str(requirements))
    return venv


# -- step 3-4: inside the venv --


class _InertMeta(type):
    """Every attribute, call and subscript of a left-out module gives another inert class."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        sub = _InertMeta(name, (_Inert,), {"__module__": cls.__module__})
        setattr(cls, name, sub)
        return sub

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return cls

    def __getitem__(cls, _item: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __enter__(cls) -> Any:
        return cls

    def __exit__(cls, *_exc: Any) -> None:
        return None

    def __lt__(cls, _other: Any) -> bool:
        return False

    __gt__ = __le__ = __ge__ = __lt__

    def __int__(cls) -> int:
        return 0

    def __index__(cls) -> int:
        return 0

    def __float__(cls) -> float:
        return 0.0

    def __add__(cls, _other: Any) -> Any:
        return cls

    __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = __add__


class _Inert(metaclass=_InertMeta):
    pass


class _InertModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _InertMeta(name, (_Inert,), {"__module__": self.__name__})
        setattr(self, name, value)
        return value


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if any(fullname == r or fullname.startswith(r + ".") for r in STUBBED_ROOTS):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _InertModule(spec.name)
        module.__path__ = []
        module.__version__ = "2.14.0+cpu"  # torch.__version__: read by version checks only
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _kind(action: argparse.Action) -> str:
    """``bool`` for a switch, else the name argparse puts in "invalid <name> value" (``int``,
    ``float``, ``str``, ``human_readable_int``, ``loads``, …)."""
    if action.nargs == 0:
        return "bool"
    kind = action.type
    return str(getattr(kind, "__name__", None) or type(kind).__name__) if kind is not None else "str"


def dump(version: str) -> dict[str, Any]:
    """The parser's flags, built on the CPU platform (runs inside the throwaway venv)."""
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"
    sys.meta_path.insert(0, _InertFinder())
    import vllm.platforms as platforms
    from vllm.platforms.cpu import CpuPlatform

    platforms._current_platform = CpuPlatform()  # before anything asks which platform this is
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    # Where make_arg_parser lives: common (0.3x), launchers (0.29), openai (up to 0.28).
    for where in PARSER_MODULES:
        try:
            make_arg_parser = importlib.import_module(where).make_arg_parser
            break
        except ModuleNotFoundError as err:
            if not where.startswith(str(err.name)):  # a missing dependency, not the layout
                raise
    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    flags: dict[str, Any] = {}
    # What argparse itself matches a command line against: hidden spellings included (vLLM keeps
    # `--no-enable-x` registered but out of the help).
    registered = parser._option_string_actions
    for option, action in registered.items():
        if not option.startswith("--"):
            continue
        # As argparse names the action in its errors ("argument --a/--b: invalid …"): its visible
        # option strings, in declaration order.
        entry: dict[str, Any] = {
            "dest": action.dest,
            "type": _kind(action),
            "options": list(action.option_strings),
        }
        if action.choices is not None:
            entry["choices"] = sorted(str(c) for c in action.choices)
        if action.nargs is not None:
            entry["nargs"] = action.nargs if isinstance(action.nargs, int) else str(action.nargs)
        flags[option] = entry
    import vllm

    return {
        "vllm_version": getattr(vllm, "__version__", version),
        "generated_by": "scripts/vllm_flags.py: make_arg_parser of the PyPI wheel, CPU platform, torch stubbed",
        "flag_count": len(flags),
        "flags": dict(sorted(flags.items())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("version", help="the vLLM version on PyPI, e.g. 0.33.0")
    parser.add_argument("--work", type=Path, help="where the throwaway venv goes (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="default: components/vllm_flags/<version>.json")
    parser.add_argument("--sim", action="store_true", help="also write the simulator's copy")
    parser.add_argument("--dump", type=Path, help=argparse.SUPPRESS)  # inside the venv: write here
    args = parser.parse_args()
    if args.dump:
        # A file, not stdout: some vLLM versions take stdout over while they import.
        args.dump.write_text(json.dumps(dump(args.version), indent=1, sort_keys=True))
        return 0
    work = args.work or Path(tempfile.mkdtemp(prefix="vllm-flags-"))
    work.mkdir(parents=True, exist_ok=True)
    venv = build_venv(args.version, work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CUDA", "VLLM_"))}
    dumped = work / f"flags-{args.version}.json"
    done = subprocess.run(
        [str(venv / "bin" / "python"), __file__, args.version, "--dump", str(dumped)],
        env=env, cwd=work, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-6000:])
        return 1
    table = json.loads(dumped.read_text())
    wheel = sorted((work / f"wheel-{args.version}").glob("vllm-*.whl"))[0].name
    table["generated_by"] = (
        f"scripts/vllm_flags.py {args.version}: make_arg_parser of {wheel} from PyPI, "
        "built on the CPU platform with torch and the GPU stack stubbed"
    )
    out = args.out or tables_folder() / f"{args.version}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for path in [out, *([SIM_COPY] if args.sim else [])]:
        path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"{path}: {table['flag_count']} flags of vLLM {table['vllm_version']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
