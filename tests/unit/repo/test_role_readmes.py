"""scripts/role_readmes.py: role READMEs generated from meta/argument_specs.yml, and the
--check that fails on stale READMEs, undeclared defaults and undescribed options. Runs on
small role trees under tmp_path, then on the repository's own roles. No Ansible run."""

from __future__ import annotations

from pathlib import Path

import pytest
from repo_scripts import REPO, load_script

rr = load_script("role_readmes.py", "role_readmes")

SPEC = """\
---
argument_specs:
  main:
    short_description: A demo role.
    options:
      demo_name:
        type: str
        default: demo
        description: Name of the thing.
      demo_mode:
        type: str
        choices: [fast, safe]
        default: safe
        description: How to run.
      demo_items:
        type: list
        elements: str
        description:
          - Items to handle,
            one per line.
      demo_target:
        type: str
        required: true
        description: Where to put it (a | b).
      demo_expr:
        type: dict
        description: A computed default.
      demo_nodes:
        type: list
        elements: dict
        description: The nodes.
        options:
          name:
            type: str
            required: true
            description: Node name.
      demo_inventory:
        type: dict
        description: Inventory-wide, no default.
  extra:
    short_description: Another entry point.
    options:
      demo_extra_flag:
        type: bool
        default: false
        description: A flag of the extra entry point.
"""

DEFAULTS = """\
---
demo_name: demo
demo_mode: safe
demo_items: [a, b]
demo_expr: >-
  {{ some_inventory_variable | default({})
     | combine({'sessions': another_inventory_variable | default('10.224.0.0/12')}) }}
demo_nodes:
  - name: one
demo_extra_flag: false
demo__private: 1
"""


def make_role(roles: Path, name: str = "demo", spec: str = SPEC, defaults: str = DEFAULTS) -> Path:
    role = roles / name
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(spec)
    (role / "defaults" / "main.yml").write_text(defaults)
    return role


@pytest.fixture
def roles(tmp_path: Path) -> Path:
    roles = tmp_path / "roles"
    make_role(roles)
    return roles


# --- (a) a fresh README ----------------------------------------------------------------
def test_a_missing_readme_is_created_with_one_row_per_option(roles: Path) -> None:
    assert rr.write(roles) == [roles / "demo" / "README.md"]
    text = (roles / "demo" / "README.md").read_text()

    assert text.startswith("# demo\n\nA demo role.\n\n## Variables\n\n" + rr.BEGIN + "\n")
    assert text.rstrip("\n").endswith(rr.END)
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert rows == [
        "| `demo_name` | str | `demo` | Name of the thing. |",
        "| `demo_mode` | str, one of `fast`, `safe` | `safe` | How to run. |",
        # No default in the spec: the one from defaults/main.yml; a list description
        # becomes one line.
        "| `demo_items` | list of str | `[a, b]` | Items to handle, one per line. |",
        r"| `demo_target` | str | **required** | Where to put it (a \| b). |",
        # A long Jinja default, shortened at a space and closed.
        "| `demo_expr` | dict | "
        "`{{ some_inventory_variable \\| default({}) \\| combine({'sessions': … }}` "
        "| A computed default. |",
        "| `demo_nodes` | list of dict | `[{name: one}]` | The nodes. |",
        "| `demo_nodes[].name` | str | **required** | Node name. |",
        "| `demo_inventory` | dict | unset | Inventory-wide, no default. |",
        "| `demo_extra_flag` | bool | `false` | A flag of the extra entry point. |",
    ]
    # Each entry point under its own heading, main first; the extra one names tasks_from.
    assert text.index("### Entry point `main`") < text.index("### Entry point `extra`")
    assert "Another entry point (`tasks_from: extra`)." in text
    assert text.index("`demo_inventory`") < text.index("### Entry point `extra`")
    assert rr.check(roles) == []
    assert rr.write(roles) == []  # a second run changes nothing


def test_a_hand_written_table_is_replaced_and_the_prose_kept(roles: Path) -> None:
    readme = roles / "demo" / "README.md"
    readme.write_text(
        "# demo\n\nWhat it does.\n\n## Variables\n\n"
        "| variable | default | meaning |\n|---|---|---|\n| `demo_name` | `demo` | old |\n\n"
        "A note about the variables.\n\n## Example\n\nA play.\n"
    )
    rr.write(roles)
    text = readme.read_text()

    assert "| variable | default | meaning |" not in text
    assert "| `demo_name` | `demo` | old |" not in text
    assert text.count("## Variables") == 1
    assert text.index("## Variables") < text.index(rr.BEGIN) < text.index(rr.END)
    assert text.index(rr.END) < text.index("A note about the variables.")
    assert text.startswith("# demo\n\nWhat it does.\n\n")
    assert text.endswith("## Example\n\nA play.\n")
    assert rr.check(roles) == []


def test_a_readme_without_variables_section_gets_one_before_the_example(roles: Path) -> None:
    readme = roles / "demo" / "README.md"
    readme.write_text("# demo\n\nWhat it does.\n\n## Example\n\nA play.\n")
    rr.write(roles)
    text = readme.read_text()

    assert text.index("What it does.") < text.index("## Variables\n\n" + rr.BEGIN)
    assert text.index(rr.END) < text.index("## Example")
    assert rr.check(roles) == []


# --- (b) a stale README ----------------------------------------------------------------
def test_b_stale_and_missing_readmes_are_reported_and_left_alone(
    roles: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_role(roles, "other", SPEC.replace("demo_", "other_"), DEFAULTS.replace("demo_", "other_"))
    rr.write(roles)
    spec = roles / "demo" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("Name of the thing.", "Name of the widget."))
    (roles / "other" / "README.md").unlink()
    before = (roles / "demo" / "README.md").read_text()

    problems = rr.check(roles)
    assert problems == [
        "roles/demo/README.md is stale (its variables block differs from "
        "roles/demo/meta/argument_specs.yml): run `python scripts/role_readmes.py` to fix it",
        "roles/other/README.md is missing: run `python scripts/role_readmes.py` to fix it",
    ]
    assert rr.main(["--check", "--roles-dir", str(roles)]) == 1
    err = capsys.readouterr().err
    assert "roles/demo/README.md is stale" in err
    assert "roles/other/README.md is missing" in err
    assert (roles / "demo" / "README.md").read_text() == before
    assert not (roles / "other" / "README.md").exists()

    assert rr.main(["--roles-dir", str(roles)]) == 0
    assert "Name of the widget." in (roles / "demo" / "README.md").read_text()
    assert rr.main(["--check", "--roles-dir", str(roles)]) == 0


def test_b_a_hand_edited_block_is_stale(roles: Path) -> None:
    rr.write(roles)
    readme = roles / "demo" / "README.md"
    readme.write_text(readme.read_text().replace("Name of the thing.", "Edited by hand."))

    assert [p for p in rr.check(roles) if "README.md is stale" in p] != []


# --- (c) undeclared defaults, undescribed options --------------------------------------
def test_c_an_undeclared_default_is_reported_by_role_and_name(roles: Path) -> None:
    rr.write(roles)
    defaults = roles / "demo" / "defaults" / "main.yml"
    defaults.write_text(defaults.read_text() + "demo_forgotten: 3\n")

    problems = rr.check(roles)
    assert len(problems) == 1
    assert problems[0].startswith(
        "roles/demo/defaults/main.yml: role demo: variable demo_forgotten is set in "
        "defaults/main.yml but not declared in roles/demo/meta/argument_specs.yml"
    )
    assert "demo__private" not in " ".join(problems)  # <role>__* is private
    assert rr.main(["--check", "--roles-dir", str(roles)]) == 1


def test_c_an_option_without_description_is_reported(roles: Path) -> None:
    spec = roles / "demo" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("            description: Node name.\n", ""))
    rr.write(roles)

    assert rr.check(roles) == [
        "roles/demo/meta/argument_specs.yml: role demo, entry point main: "
        "option demo_nodes[].name has no description"
    ]


# --- rendering details -----------------------------------------------------------------
def test_defaults_are_rendered_compactly_and_deterministically() -> None:
    assert rr.shorten("") == '""'
    assert rr.shorten("2.18") == '"2.18"'
    assert rr.shorten(None) == "null"
    assert rr.shorten({"max-size": "10m", "max-file": "3"}) == '{max-size: 10m, max-file: "3"}'
    long_list = [f"item-number-{i}" for i in range(20)]
    short = rr.shorten(long_list)
    assert short.startswith("[item-number-0, item-number-1, ") and short.endswith(", …]")
    assert len(short) <= rr.DEFAULT_BUDGET
    assert rr.shorten(long_list) == short
    # Paths and URLs are never cut.
    url = "https://example.org/" + "x" * 100
    assert rr.shorten(url) == url
    assert rr.code("a | b") == r"`a \| b`"
    assert rr.prose(["one <session>.cfg", "a|b"]) == r"one \<session>.cfg a\|b"


# --- (d) the repository's own roles ----------------------------------------------------
def test_d_the_repository_roles_pass_the_check(capsys: pytest.CaptureFixture[str]) -> None:
    assert rr.check(REPO / "roles") == []
    assert rr.main(["--check"]) == 0
    assert "role READMEs up to date" in capsys.readouterr().out
    # Every role with an argument spec has a README carrying the block.
    for role in rr.find_roles(REPO / "roles"):
        assert rr.BEGIN in (role / "README.md").read_text()
