"""The shrink rules as tables: every name of the recipe vocabulary has its row, and the rows keep
their promises on any value (Hypothesis), with no model built."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tinykit.errors import ShrinkConstraintError
from tinykit.model.layers import FIELD_KINDS, PERIOD_KINDS, plan_layers
from tinykit.model.recipes import recipe_for, recipes_dir
from tinykit.model.shrink.knobs import KNOB_RULES, knob_values
from tinykit.model.spec import ShrinkSpec

GENERIC = tomllib.loads((recipes_dir() / "_generic.toml").read_text())

# Knobs whose rule only ever lowers a size (the others set a spec value: width // heads, the vocab).
NEVER_GROW = {
    "width",
    "heads",
    "intermediate",
    "expert_intermediate",
    "positions",
    "experts",
    "at_most_one",
    "channels",
    "window",
    "stage_depths",
    "image_size",
    "patch_size",
}


def test_every_generic_knob_has_a_rule_and_every_rule_a_knob():
    assert list(KNOB_RULES) == list(GENERIC["knobs"])
    assert set(KNOB_RULES) >= NEVER_GROW


def test_every_layer_field_name_has_a_row():
    rows = set(FIELD_KINDS) | set(PERIOD_KINDS)
    read_by_the_walk = {"depth_lists", "tower_layer_refs"}  # model/shrink/nodes.py
    assert set(GENERIC["layer_fields"]) == (rows - {"per_layer_lists", "keyed_dicts"}) | (
        read_by_the_walk
    )


def test_generic_lists_hold_one_entry_per_line():
    """So that two branches adding keys to one knob merge without a conflict."""
    lines = (recipes_dir() / "_generic.toml").read_text().splitlines()
    for line in lines:
        if line.startswith((" ", "#")) or " = " not in line:
            continue
        key, _, value = line.partition(" = ")
        assert not value.startswith("[") or value == "[", f"{key} lists entries on one line"


sizes = st.integers(1, 10**6)


@given(
    knob=st.sampled_from(sorted(NEVER_GROW)),
    value=st.one_of(sizes, st.lists(sizes, min_size=1, max_size=6)),
    image_size=sizes,
    spec=st.builds(
        ShrinkSpec,
        hidden=st.sampled_from([8, 16, 32, 64, 256]),
        heads=st.sampled_from([1, 2, 4]),
        kv_heads=st.just(1),
        layers=st.one_of(st.just("auto"), st.integers(1, 8)),
    ),
)
def test_size_rules_never_grow_a_value(knob, value, image_size, spec):
    recipe = recipe_for("")
    key = recipe.knobs[knob][0]
    out = knob_values({"image_size": image_size, key: value}, recipe, spec, None)
    tiny = out.get(key, value)
    pairs = zip(tiny, value, strict=True) if isinstance(value, list) else [(tiny, value)]
    assert all(0 <= t <= v for t, v in pairs), (key, value, tiny)


@given(
    types=st.lists(st.sampled_from(["full", "sliding", "linear"]), min_size=2, max_size=24),
    step=st.integers(1, 6),
    layers=st.one_of(st.just("auto"), st.integers(3, 30)),
)
def test_a_plan_keeps_every_block_type_and_what_each_field_says_of_it(types, step, layers):
    depth = len(types)
    node = {"num_hidden_layers": depth, "layer_types": types, "decoder_sparse_step": step}
    fields = recipe_for("").layer_fields
    says = PERIOD_KINDS["periods_end"].says
    block_types = {(types[i], says(i, (step,))) for i in range(depth)}
    if layers != "auto" and layers < len(block_types):
        with pytest.raises(ShrinkConstraintError, match="cannot keep all"):
            plan_layers(node, "num_hidden_layers", fields, layers, "'test'")
        return
    plan = plan_layers(node, "num_hidden_layers", fields, layers, "'test'")
    new = plan.fields
    assert new["num_hidden_layers"] == len(plan.kept) == len(new["layer_types"])
    assert {(types[i], says(i, (step,))) for i in plan.kept} == block_types
    for j, i in enumerate(plan.kept):
        assert new["layer_types"][j] == types[i]
        assert says(j, (new.get("decoder_sparse_step", step),)) == says(i, (step,))
