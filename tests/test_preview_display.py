"""`make preview`'s display (ops/preview_display.py) on transcripts of the real engine, and the one
line Prometheus' release says per changed file (components/docker/prometheus_release.py) on the
stack's real rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.docker.prometheus_release import describe_change, files_changes, say_what_changes
from components.render.prometheus_config import ScrapeSpec
from components.render.prometheus_rules import render_alert_rules
from ops.preview_display import compact
from tests.promtool_rules import stack

FIXTURES = Path(__file__).parent / "fixtures" / "preview"


def shown(name: str) -> tuple[list[str], list[str]]:
    """(the engine's lines, what the filter keeps of them)."""
    engine = (FIXTURES / name).read_text().splitlines(keepends=True)
    return [line.rstrip("\n") for line in engine], [line.rstrip("\n") for line in compact(engine)]


def test_the_limit_preview_keeps_every_change_and_drops_what_stays() -> None:
    engine, kept = shown("max-model-len-enforce-eager.txt")
    assert len(engine) == 108 and len(kept) < 60, "\n".join(kept)
    # Only removes, and keeps the order.
    it = iter(engine)
    assert all(any(line == other for other in it) for line in kept)
    for line in engine:
        marked = line.lstrip().startswith(("~ ", "+ ", "- ", "+-"))
        if marked and line.strip() != '~ ["*"] (hidden)':
            assert line in kept, line  # every change, whatever its depth
    for dropped in (
        '        --port                   : "8000"',  # an unchanged flag of vllmFlags
        '        [0]: "/models/GLM-5.3-Flash-sim"',  # an unchanged element of vllmArgs
        '        docker_host      : "unix:///var/run/docker.sock"',  # an unchanged input of the front's config
        "            walk          : 1",  # an unchanged key of an unchanged map
    ):
        assert dropped in engine and dropped not in kept, dropped
    assert not [line for line in kept if "[id=" in line or "[provider=" in line]
    assert sum("[urn=" in line for line in kept) == 6  # each changed resource named once
    assert any(line.lstrip().startswith("effect ") for line in kept)  # what the reload costs
    assert "    6 changes. 25 unchanged" in kept
    said = [line for line in engine if line.startswith(("[smoke-gate]", "[prometheus]", "warning:"))]
    assert len(said) == 6 and all(line in kept for line in said)
    # The engine's blank line after each provider line is left out.
    assert all(
        kept[kept.index(line) + 1 : kept.index(line) + 2] != [""] for line in said if line.startswith("[")
    )


def test_the_weight_preview_shows_the_weight_by_name() -> None:
    engine, kept = shown("weight-bob-2-3.txt")
    assert len(engine) == 47 and len(kept) < 30, "\n".join(kept)
    at = kept.index("      ~ api_key_names    : {")
    assert kept[at + 1 : at + 3] == ["          ~ bob           : 2 => 3", "        }"]


def test_a_created_resource_is_shown_whole() -> None:
    engine, kept = shown("prometheus-release-created.txt")
    start = next(
        i for i, line in enumerate(engine) if line.startswith("    + pulumi-python:dynamic:Resource")
    )
    end = next(i for i, line in enumerate(engine) if line.startswith("Resources:"))
    created = [line for line in engine[start:end] if "[id=" not in line and "[provider=" not in line]
    assert len(created) > 250 and all(line in kept for line in created)


def test_an_error_is_shown_whole() -> None:
    refused = [
        "Previewing update (local):\n", "  pulumi:pulumi:Stack: (same)\n", "error: invalid stack configuration:\n",
        "  glm:serving.maxModelLen=0 must be greater than 0.\n", "      and a line under it\n", "Resources:\n",
    ]  # fmt: skip
    assert list(compact(refused)) == [line for line in refused if "(same)" not in line]


def test_the_filter_never_hides_what_it_cannot_read() -> None:
    odd = ["Previewing update (local):\n", "    ~ x:y:Z: (update)\n", "      ~ a: {\n", "          b\n"]
    assert list(compact(odd))[:3] == odd[:3]


# ---- what changed in a release's file ----------------------------------------------------------


def rules(**overrides: object) -> str:
    return render_alert_rules(ScrapeSpec.of(stack("local", **overrides)))


def test_a_shorter_max_model_len_names_the_kv_pool_alert_and_its_fields() -> None:
    line = describe_change("rules.yml", rules(), rules(serving={"maxModelLen": 16384}))
    assert line.startswith(f"rules.yml: {len(rules().encode()):,} → ")
    # The KV-pool alert checks the pool against max_model_len (its expr, its texts); the capacity
    # alert's text quotes the limit.
    assert "VllmKvPoolBelowMaxModelLen: expr, description, summary" in line, line
    assert "VllmCapacityWaitNothingRunning: description" in line, line


def test_a_threshold_shows_old_and_new_value() -> None:
    line = describe_change("rules.yml", rules(), rules(monitoring={"thresholds": {"kvCacheUsage": 0.8}}))
    assert line.endswith("; alert VllmKvCacheNearlyFull: expr `0.9` → `0.8`, description, summary"), line


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ({"a": "x"}, {"a": "x"}, []),
        ({}, {"status-page/status.js": "x\n"}, ["status-page/status.js: added, 2 bytes"]),
        ({"scrape-key": "k"}, {}, ["scrape-key: removed"]),
    ],
)
def test_files_changes_says_each_changed_file_once(
    old: dict[str, str], new: dict[str, str], said: list[str]
) -> None:
    assert files_changes(old, new) == said


def test_a_release_says_why_it_is_delivered_again(capsys: pytest.CaptureFixture[str]) -> None:
    files = {"rules.yml": rules(), "prometheus.yml": "global: {}\n"}
    was = {"contents": files, "container_id": "a", "version": "1+x", "secrets_digest": "d"}
    say_what_changes(was, {**was, "version": "1+y"})
    assert capsys.readouterr().err == (
        "[prometheus] the same files, delivered again: the release's code changed (version)\n"
    )
    say_what_changes(was, {**was, "container_id": "b"})
    assert "delivered again to a new Prometheus container" in capsys.readouterr().err
    lowered = {**files, "rules.yml": rules(monitoring={"thresholds": {"kvCacheUsage": 0.8}})}
    say_what_changes(was, {**was, "contents": lowered})
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("[prometheus] rules.yml: ") and said[1].startswith(
        "[prometheus] Prometheus files only"
    )
    assert len(said) == 2
