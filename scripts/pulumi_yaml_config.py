"""Write Pulumi.yaml's ``config:`` descriptions from the pydantic models, nested keys included.

python scripts/pulumi_yaml_config.py          # rewrite the descriptions in Pulumi.yaml
python scripts/pulumi_yaml_config.py --check  # exit 1 when Pulumi.yaml is out of date
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.config import StackConfig, hardware_description  # noqa: E402


def _model_of(annotation: typing.Any) -> type[BaseModel] | None:
    candidates = [annotation, *typing.get_args(annotation)]
    return next((a for a in candidates if isinstance(a, type) and issubclass(a, BaseModel)), None)


def keys(model: type[BaseModel]) -> str:
    """``{a, b: {c, d}, e: [{f}]}``: every key of ``model``, nested models spelled out."""
    parts = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        nested = _model_of(field.annotation)
        if nested is None:
            parts.append(key)
        elif typing.get_origin(field.annotation) is list:
            parts.append(f"{key}: [{keys(nested)}]")
        else:
            parts.append(f"{key}: {keys(nested)}")
    return "{" + ", ".join(parts) + "}"


def descriptions() -> dict[str, str]:
    """Pulumi.yaml's description of each top-level ``glm:`` key."""
    out = {}
    for name, field in StackConfig.model_fields.items():
        # glm:hardware names the profiles registered now, not those at import time.
        text = (hardware_description() if name == "hardware" else field.description or "").rstrip(".")
        nested = _model_of(field.annotation)
        out[field.alias or name] = f"{text}: {keys(nested)}." if nested else f"{text}."
    return out


def render(text: str) -> str:
    """``text`` (Pulumi.yaml) with each config key's ``description:`` line regenerated."""
    wanted = descriptions()
    lines, key, in_config = [], None, False
    for line in text.splitlines():
        if not line.startswith(" "):
            in_config = line.startswith("config:")
        elif in_config and line.startswith("  ") and not line.startswith("   "):
            key = line.strip().rstrip(":")
        elif in_config and key in wanted and line.startswith("    description:"):
            line = f"    description: {json.dumps(wanted[key], ensure_ascii=False)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def main() -> int:
    path = ROOT / "Pulumi.yaml"
    current = path.read_text()
    updated = render(current)
    if "--check" in sys.argv:
        if updated != current:
            print(
                "Pulumi.yaml's config descriptions are out of date: python scripts/pulumi_yaml_config.py",
                file=sys.stderr,
            )
            return 1
        return 0
    path.write_text(updated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
