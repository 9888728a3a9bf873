"""captioning/config_yaml.py: a user's YAML file is bounded before Hydra reads it (one line naming the file)."""

from __future__ import annotations

import pytest

from captioning.compose import CONFIG_DIR
from captioning.config_command_line import command_line_problem
from captioning.config_yaml import MAX_YAML_NODES, check_yaml_file
from captioning.errors import ConfigError

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)


def test_a_billion_laughs_yaml_is_refused_in_one_line_without_expanding_it(tmp_path):
    (tmp_path / "conf" / "callbacks").mkdir(parents=True)
    bomb = tmp_path / "conf" / "callbacks" / "bomb.yaml"
    bomb.write_text(BOMB)
    assert len(BOMB) < 2048
    line = command_line_problem(
        ["--config-dir", str(tmp_path / "conf"), "callbacks=bomb"], CONFIG_DIR, "train"
    )
    assert line.startswith(f"{bomb}:") and f"over {MAX_YAML_NODES:,}" in line


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "a: !!python/object/apply:os.system [ls]\n",
            "1: YAML tag !!python/object/apply:os.system is not allowed",
        ),
        ("a: 1\nb: [1, 2\n", "YAML syntax error"),
        ("a: &a [*a]\n", "1: a recursive YAML alias"),
    ],
)
def test_tags_syntax_errors_and_recursive_aliases_are_one_line(tmp_path, text, expected):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        check_yaml_file(path)
    assert str(err.value).startswith(str(path)) and expected in str(err.value) and "\n" not in str(err.value)


def test_plain_yaml_with_aliases_is_read(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: &a {x: 1}\nb: *a\n")
    assert check_yaml_file(path) == {"a": {"x": 1}, "b": {"x": 1}}
