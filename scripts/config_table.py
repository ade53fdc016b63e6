"""Render README's config table from the pydantic models (the one source of truth).

python scripts/config_table.py          # rewrite the table in README.md
python scripts/config_table.py --check  # exit 1 when README.md is out of date
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.config import SECRET_KEYS, StackConfig, hardware_description  # noqa: E402
from components.profiles import PROFILES  # noqa: E402

START, END = "<!-- config-table:start -->", "<!-- config-table:end -->"


def _model_of(annotation: typing.Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None


def _type_name(annotation: typing.Any) -> str:
    if typing.get_origin(annotation) is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " \\| ".join(_type_name(a) for a in typing.get_args(annotation) if a is not type(None))
    if typing.get_origin(annotation) is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if typing.get_origin(annotation) in (list, dict):
        return getattr(typing.get_origin(annotation), "__name__", str(annotation))
    return getattr(annotation, "__name__", str(annotation))


def _default(field: typing.Any, in_list: bool = False) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        return "" if isinstance(value, BaseModel) else f"`{value}`"
    if field.default is PydanticUndefined:
        return "required" if field.alias == "hardware" or in_list else "profile"
    return f"`{field.default}`" if field.default is not None else "unset"


def rows(model: type[BaseModel], prefix: str, in_list: bool = False) -> list[str]:
    out = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        nested = _model_of(field.annotation)
        if nested is not None and typing.get_origin(field.annotation) is not list:
            out += rows(nested, f"{key}.", in_list)
            continue
        kind = f"list of {nested.__name__}" if nested else _type_name(field.annotation)
        description = field.description or ""
        if key == "glm:hardware":  # the profiles registered now (components/profiles.py)
            kind, description = " \\| ".join(f"`{p}`" for p in PROFILES), hardware_description()
        out.append(f"| `{key}` | {kind} | {_default(field, in_list)} | {description} |")
        if nested is not None:  # each item's keys; required ones are required in every item
            out += rows(nested, f"{key}[].", in_list=True)
    return out


def table() -> str:
    lines = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    lines += rows(StackConfig, "glm:")
    lines += [f"| `glm:{key}` | secret | | {text} |" for key, text in SECRET_KEYS.items()]
    return "\n".join(lines)


def main() -> int:
    readme = (ROOT / "README.md").read_text()
    head, rest = readme.split(START, 1)
    _, tail = rest.split(END, 1)
    updated = f"{head}{START}\n{table()}\n{END}{tail}"
    if "--check" in sys.argv:
        if updated != readme:
            print("README.md's config table is out of date: python scripts/config_table.py", file=sys.stderr)
            return 1
        return 0
    (ROOT / "README.md").write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
