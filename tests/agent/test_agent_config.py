"""AgentConfig.reasoning_effort: the engine's five levels, client aliases, None for the model default."""

from __future__ import annotations

import pytest

from agent.config import REASONING_EFFORTS, ConfigError, load_config


@pytest.mark.parametrize("word", ["none", "low", "medium", "high", "max"])
def test_each_engine_level_is_kept_as_given(word):
    assert load_config(overrides={"reasoning_effort": word}).reasoning_effort == word


@pytest.mark.parametrize(("alias", "level"), [("minimal", "low"), ("xhigh", "max"), ("HIGH", "high"), (" None ", "none")])
def test_aliases_map_to_the_nearest_level(alias, level):
    assert load_config(overrides={"reasoning_effort": alias}).reasoning_effort == level


def test_unset_means_the_model_default_and_bad_words_name_the_field():
    assert load_config().reasoning_effort is None
    assert REASONING_EFFORTS == ("none", "low", "medium", "high", "max")
    with pytest.raises(ConfigError, match="reasoning_effort: got 'extreme'"):
        load_config(overrides={"reasoning_effort": "extreme"})
