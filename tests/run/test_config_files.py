"""A user's files read strictly (rlnb/user_files.py): a YAML key given twice refused with the file,
the key's dotted path and both lines, as OmegaConf refuses it, in every reader of rlnb's YAML (a
config, a run's config.yaml, an override's value, a notebook's -p value); a folder where a file
belongs (and a file where a folder belongs) named as such."""

import pytest
import yaml
from omegaconf import OmegaConf

import rlnb
from rlnb.config import parse_override
from rlnb.run.config.master_config import read_yaml
from rlnb.run.notebooks.parameters import parse_value
from rlnb.run.store.rundir import RunDir
from rlnb.user_files import expect_file, expect_folder, load_yaml


@pytest.mark.parametrize("text, key, lines", [
    ("a: 1\nb: 2\na: 3\n", "a", "at lines 1 and 3"),
    ("grpo:\n  seed: 1\n  lr: 2\n  seed: 1\n", "grpo.seed", "at lines 2 and 4"),
    ("l:\n- {x: 1, y: 2, x: 3}\n", "l[0].x", "on line 2"),
    ("a:\n  b:\n    c: 1\n  d: 0\n  b: {}\n", "a.b", "at lines 2 and 5"),
])
def test_a_key_given_twice_is_named_with_its_path_and_both_lines(text, key, lines, tmp_path):
    with pytest.raises(ValueError) as err:
        load_yaml(text, "config file x.yaml")
    message = str(err.value)
    assert message.startswith(f"config file x.yaml: key '{key}' appears twice, {lines} ")
    assert "\n" not in message
    with pytest.raises(yaml.YAMLError, match="found duplicate key"):  # OmegaConf's own verdict
        (tmp_path / "x.yaml").write_text(text)
        OmegaConf.load(tmp_path / "x.yaml")


@pytest.mark.parametrize("text, value", [
    ("a: 1\nb: 2\n", {"a": 1, "b": 2}),
    ("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n", {"base": {"x": 1, "y": 2},
                                                       "c": {"x": 3, "y": 2}}),  # merge key
    ("a: &x {k: 1}\nb: *x\n", {"a": {"k": 1}, "b": {"k": 1}}),  # an alias, checked once
    ("l: [{x: 1}, {x: 2}]\n", {"l": [{"x": 1}, {"x": 2}]}),  # the same key in two mappings
    ("", None),
    ("1: a\n'1': b\n", {1: "a", "1": "b"}),  # two keys: an int and a string
])
def test_what_yaml_allows_still_loads_as_pyyaml_loads_it(text, value):
    assert load_yaml(text, "x") == value == yaml.safe_load(text)


def test_a_syntax_error_is_one_line_with_line_and_column():
    with pytest.raises(ValueError, match=r"^config file x\.yaml is not valid YAML at line 3, "
                                         r"column 1: expected the node content"):
        load_yaml("a: 1\nb: [1,\n", "config file x.yaml")


def test_every_reader_of_rlnbs_yaml_refuses_a_repeated_key(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("grpo:\n  seed: 1\n  seed: 2\n")
    for call in (lambda: read_yaml(cfg), lambda: rlnb.load_config(cfg)):
        with pytest.raises(ValueError, match=r"c\.yaml: key 'grpo\.seed' appears twice, at lines "
                                             r"2 and 3"):
            call()
    with pytest.raises(ValueError, match=r"override 'grpo\.adv_estimator=\{name: a, name: b\}': "
                                         r"the value: key 'name' appears twice"):
        parse_override("grpo.adv_estimator={name: a, name: b}")
    with pytest.raises(ValueError, match=r"cannot read the value '\{a: 1, a: 2\}': key 'a' "
                                         "appears twice"):
        parse_value("{a: 1, a: 2}")
    # a run's own record, edited by hand: refused when the run dir is opened again
    run = tmp_path / "run"
    RunDir(run, config={"grpo": {"seed": 1}})
    (run / "config.yaml").write_text("grpo:\n  seed: 1\n  seed: 1\n")
    with pytest.raises(ValueError, match=r"config\.yaml: key 'grpo\.seed' appears twice.*it is "
                                         r"the record of what the run trained"):
        RunDir(run, config={"grpo": {"seed": 1}})
    assert (run / "config.yaml").read_text() == "grpo:\n  seed: 1\n  seed: 1\n"  # untouched


def test_a_folder_where_a_file_belongs_and_back(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "f").write_text("x")
    assert expect_file(tmp_path / "f", "data file") == tmp_path / "f"
    assert expect_folder(tmp_path / "d", "run dir") == tmp_path / "d"
    with pytest.raises(ValueError, match=r"^config file .*/d is a directory, not a file$"):
        expect_file(tmp_path / "d", "config file")
    with pytest.raises(ValueError, match=r"^config file not found: .*/nope$"):
        expect_file(tmp_path / "nope", "config file")
    with pytest.raises(ValueError, match=r"^run dir .*/f is a file, not a directory$"):
        expect_folder(tmp_path / "f", "run dir")
    with pytest.raises(ValueError, match=r"config file .*/d is a directory, not a file"):
        rlnb.load_config(tmp_path / "d")
