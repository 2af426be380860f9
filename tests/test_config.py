"""Config presets, overrides, validation and the JSON round trip."""

from __future__ import annotations

import pytest

from placeto_jax.config import PIPELINES, Config, from_dict, make_config, own_pipeline, to_dict


def test_preset_then_overrides():
    config = make_config("tiny", ["train.episodes=12", "policy.head_widths=8,4"], n_devices=3)
    assert config.train.episodes == 12 and config.n_devices == 3
    assert config.policy.head_widths == (8, 4)
    assert config.run.group_target == 48  # from the preset
    assert from_dict(to_dict(config)) == config


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("train.episodes=0", "train.episodes must be >= 1"),
        ("env.traversal=sideways", "env.traversal='sideways' is not one of"),
        ("train.episodes=many", "bad value 'many' for config train.episodes"),
        ("train.nothing=1", "unknown config key 'train.nothing'"),
        ("episodes", "expected KEY=VALUE"),
        ("run.buckets=12", "multiples of 8"),
    ],
)
def test_bad_settings_name_the_field(item, message):
    with pytest.raises(ValueError, match=message):
        make_config(None, [item])


def test_unknown_preset_and_keys():
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        make_config("huge")
    with pytest.raises(ValueError, match="unknown config key 'extra'"):
        from_dict({**to_dict(Config()), "extra": 1})


def test_overrides_apply_together_whatever_their_order():
    """`--set train.teacher_passes=3 --set train.teacher=searched` is a valid config: the
    passes need the searched teacher only in the result, not after the first setting."""
    late = make_config("construct", ["train.teacher_passes=3", "train.teacher=searched"])
    early = make_config("construct", ["train.teacher=searched", "train.teacher_passes=3"])
    assert late == early and (late.train.teacher, late.train.teacher_passes) == ("searched", 3)
    with pytest.raises(ValueError, match=r"train\.teacher_passes is for"):
        make_config("construct", ["train.teacher_passes=3"])  # the best heuristic: no passes


def test_a_construct_policy_alone_samples_unless_it_looks_ahead():
    lookahead = own_pipeline(make_config("construct-lookahead", n_devices=4))
    assert lookahead == PIPELINES["policy"] and lookahead.samples == 0
    sampled = own_pipeline(make_config("construct", n_devices=4))
    assert sampled == PIPELINES["sampled"] and sampled.samples == 16
    assert sampled.source == lookahead.source == "policy"  # no search, no heuristic
    assert not sampled.search_ops and not lookahead.search_ops
