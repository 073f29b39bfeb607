"""The JAX API tables in `rules/knowledge/tables.py` checked against real jax releases.

In process against the installed jax (CI: Python 3.11 + jax 0.10.2), then in one subprocess each
against the legacy jax 0.7.2 and the newest jax venvs of `support.jaxenv` (skipped where no
interpreter for them exists). Every removed name must really be gone, every replacement must exist
in the legacy and the newest release (a rewritten file runs on both), every keyword rename target
must be a parameter of the function that replaces the old one.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from support import api_probe, jaxenv

from pmap_migrate.rules.analysis.imports import is_within
from pmap_migrate.rules.knowledge import tables
from pmap_migrate.rules.pm404_removed_jax_api import RemovedJaxApi

LEGACY_VERSION = (0, 7, 2)
ALL_REMOVED = tables.REMOVED_NAMES + tables.EXPERIMENTAL_MAPS_NAMES
REPLACEMENTS = sorted(
    {e.replacement for e in ALL_REMOVED if e.replacement is not None}
    | {tables.SHARD_MAP_REPLACEMENT, tables.PJIT_REPLACEMENT}
)
# Spellings the rules recognise that current jax must still have (private `_src` paths and the
# historical spellings recorded as removed are exempt).
EXPECTED_PRESENT = sorted(
    name
    for name in tables.PMAP | tables.JIT | tables.SHARD_MAP | tables.EXPERIMENTAL_SHARD_MAP
    if "._" not in name and tables.removed_entry(name) is None and name not in tables.PJIT_GONE
)
SIGNATURES = ("jax.jit", "jax.shard_map", "jax.experimental.shard_map.shard_map", "jax.experimental.pjit.pjit")


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".")[:3] if part.isdigit())


def probe_request() -> dict:
    names = sorted(
        {e.name for e in ALL_REMOVED}
        | set(REPLACEMENTS)
        | set(EXPECTED_PRESENT)
        | set(tables.PJIT_GONE)
        | {tables.EXPERIMENTAL_MAPS_MODULE}
    )
    same = [[e.name, e.replacement] for e in ALL_REMOVED
            if e.rename == tables.RENAME_SAME and e.name not in tables.FORWARDING_WRAPPERS]
    wrapped = [[e.name, e.replacement] for e in ALL_REMOVED if e.name in tables.FORWARDING_WRAPPERS]
    return {"names": names, "signatures": list(SIGNATURES), "identical": same, "wraps": wrapped}


def problems(answer: dict) -> list[str]:
    """Everything in the tables that ``answer`` (an api_probe answer) contradicts."""
    version = version_tuple(answer["version"])
    have = answer["names"]
    found: list[str] = []
    for entry in ALL_REMOVED:
        if version >= version_tuple(entry.absent_in) and have[entry.name]:
            found.append(f"{entry.name} is listed as removed (absent from {entry.absent_in}) but exists")
        if version < version_tuple(entry.absent_in) and not have[entry.name]:
            found.append(f"{entry.name} is listed as present in {answer['version']} (absent_in={entry.absent_in}) "
                         "but is not")
    for name in sorted(tables.PJIT_GONE | {tables.EXPERIMENTAL_MAPS_MODULE}):
        if have[name]:
            found.append(f"{name} is listed as gone but exists")
    found += [f"replacement {name} does not exist" for name in REPLACEMENTS if not have[name]]
    # A safe rename needs the same object where both still exist (jax.tree_map & co. are gone
    # everywhere checked; their jax.tree.* replacements wrap the same tree_util functions).
    for old, same in answer.get("identical", {}).items():
        if same is False:
            found.append(f"{old} is marked RENAME_SAME but is not the same object as its replacement")
    for old, wrapper in answer.get("wraps", {}).items():
        if wrapper is False:
            found.append(f"{old} is listed in FORWARDING_WRAPPERS but its replacement does not wrap it")
    if version == LEGACY_VERSION:  # where both exist: the wrapper check must have run
        missing = {e.name for e in ALL_REMOVED if e.name in tables.FORWARDING_WRAPPERS} - {
            old for old, wrapper in answer.get("wraps", {}).items() if wrapper}
        found += [f"{old}: not checked to be wrapped by its replacement" for old in sorted(missing)]
    found += [f"{name} (a spelling the rules recognise) does not exist" for name in EXPECTED_PRESENT if not have[name]]

    signatures = answer["signatures"]
    jit = signatures["jax.jit"] or []
    for old, new in tables.REMOVED_PJIT_KEYWORDS.items():
        if new not in jit:
            found.append(f"jax.jit has no parameter {new}= (replacement of {old}=)")
        for fun in ("jax.jit", "jax.experimental.pjit.pjit"):
            if old in (signatures[fun] or ()):
                found.append(f"{fun} still accepts {old}=")
    shard_map = signatures["jax.shard_map"] or []
    for old, new in tables.SHARD_MAP_KEYWORD_CHANGES.items():
        if new not in shard_map:
            found.append(f"jax.shard_map has no parameter {new}= (replacement of {old}=)")
        if old in shard_map:
            found.append(f"jax.shard_map still accepts {old}=")
    for keyword in ("mesh", "in_specs", "out_specs"):  # PM401's message: keyword-only in jax.shard_map
        if keyword not in shard_map:
            found.append(f"jax.shard_map has no parameter {keyword}=")
    experimental = signatures["jax.experimental.shard_map.shard_map"] or []
    if "check_rep" not in experimental:
        found.append("jax.experimental.shard_map.shard_map no longer takes check_rep= (PM401's message says it does)")
    if version >= (0, 10) and "auto" in experimental:
        found.append("jax.experimental.shard_map.shard_map still takes auto= (PM401's message says it does not)")
    return found


# ------------------------------------------------------------------ the tables themselves
def test_entries_are_well_formed():
    names = [e.name for e in ALL_REMOVED]
    assert len(names) == len(set(names)), "duplicate entries"
    for entry in ALL_REMOVED:
        assert entry.name.startswith("jax."), entry
        assert entry.absent_in in ("0.7.2", "0.10.2", "0.12"), entry
        assert entry.replacement is not None or entry.note, f"{entry.name}: no replacement needs a note"
        assert entry.replacement != entry.name, entry
        assert entry.rename in (None, tables.RENAME_SAME, tables.RENAME_SIMILAR), entry
        assert entry.rename is None or entry.replacement is not None, f"{entry.name}: a rename needs a replacement"
        assert (entry.rename == tables.RENAME_SIMILAR) == bool(entry.assumes), f"{entry.name}: assumes <=> similar"
    for name in tables.FORWARDING_WRAPPERS:
        assert tables.REMOVED_BY_NAME[name].rename == tables.RENAME_SAME, name


def test_removed_names_leave_other_rules_alone():
    for entry in tables.REMOVED_NAMES:
        assert entry.name not in tables.REPORTED_BY_OTHER_RULES, f"{entry.name} is reported by another rule"
        assert not is_within(entry.name, tables.EXPERIMENTAL_MAPS_MODULE), f"{entry.name} is PM402's"
    for name in tables.DEVICE_PUT_REPLICATED | tables.DEVICE_PUT_SHARDED:
        assert name not in tables.REMOVED_BY_NAME
    for entry in tables.EXPERIMENTAL_MAPS_NAMES:
        assert is_within(entry.name, tables.EXPERIMENTAL_MAPS_MODULE), entry


def test_removed_entry_prefers_the_most_specific_entry():
    assert tables.removed_entry("jax.lib.xla_bridge.get_backend").name == "jax.lib.xla_bridge.get_backend"
    assert tables.removed_entry("jax.lib.xla_bridge.get_compile_options").name == "jax.lib.xla_bridge"
    assert tables.removed_entry("jax.lib") is None
    assert tables.removed_entry("jax.tree_util.tree_map") is None


def test_pm404_prefilter_names_cover_every_entry():
    assert RemovedJaxApi.NAMES == {entry.name for entry in tables.REMOVED_NAMES}


# ------------------------------------------------------------------ the installed jax
def test_tables_match_the_installed_jax():
    pytest.importorskip("jax")
    answer = api_probe.answer(probe_request())
    assert problems(answer) == [], f"jax {answer['version']}"


# ------------------------------------------------------------------ legacy and newest jax
@pytest.fixture(scope="module", params=["legacy", "newest"])
def other_jax(request):
    env = {"legacy": jaxenv.LEGACY, "newest": jaxenv.NEWEST}[request.param]
    try:
        python = jaxenv.python_for(env)
    except jaxenv.EnvUnavailable as error:
        pytest.skip(str(error))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    environ["JAX_PLATFORMS"] = "cpu"
    done = subprocess.run(
        [str(python), str(jaxenv.REPO / "tests" / "support" / "api_probe.py")],
        input=json.dumps(probe_request()), capture_output=True, text=True, timeout=600, env=environ,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return env, json.loads(done.stdout)


def test_tables_match_legacy_and_newest_jax(other_jax):
    env, answer = other_jax
    if env is jaxenv.LEGACY:
        assert version_tuple(answer["version"]) == LEGACY_VERSION, answer["version"]
    else:
        assert version_tuple(answer["version"]) >= (0, 12), answer["version"]
    assert problems(answer) == [], f"{env.name}: jax {answer['version']}"


def test_the_rewrites_hold_the_text_that_admits_their_files():
    """PM201/PM202 admit a file with no pmap name left by the text of the rewrite itself."""
    from pmap_migrate.rules.fixes.pmap_render import Plan, render, shard_mapped_helper
    from pmap_migrate.rules.knowledge import tables

    plan = Plan(name="step", params=["x"], axis='"i"', in_axes=0, out_axes=0, static=(), donate=(),
                mesh_devices="jax.local_devices()[: {size}]", size=None, body_call="f(x)")
    for text in (render(plan), shard_mapped_helper("_shard_mapped", "  "), shard_mapped_helper("_m", "    ")):
        assert any(marker in text for marker in tables.REWRITTEN_PMAP), text


def test_the_rewrite_wrapped_to_a_project_line_length_still_admits_its_file():
    """`fix` wraps its code to the project's line length (`jax.shard_map(` and `per_device,` on two
    lines): the text that admits the file must survive, or `check` skips fixed files whose rows
    of outputs the analysis still reports (PM201)."""
    from pmap_migrate.layout import styled
    from pmap_migrate.rules.fixes.pmap_render import Plan, render
    from pmap_migrate.rules.knowledge import tables

    plan = Plan(name="step", params=["x"], axis="constants.PMAP_AXIS_NAME", in_axes=0, out_axes=0, static=(),
                donate=(), mesh_devices="jax.local_devices()[: {size}]", size=None, body_call="f(x)")
    text = render(plan, "  ")
    for limit in (60, 80):
        wrapped = styled(text, "", limit, "  ")
        assert "shard_map(per_device" not in wrapped  # the first marker is split here
        assert any(marker in wrapped for marker in tables.REWRITTEN_PMAP), wrapped
