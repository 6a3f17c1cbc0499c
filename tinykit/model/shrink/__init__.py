"""The generic shrink rules, applied by `tinykit.model.config.shrink_config` to every nested config.

nodes.py walks one (sub)config and applies, in order: the knob rules (knobs.py), the layer plan
(model/layers.py), the recipe's fixed and derived values (derive.py), RoPE sections and scaling
(rope.py) and vision-tower indexes. token_ids.py keeps every special-token id inside the vocab.
"""
