"""A walk's hostile input in the dashboard's fields (fast page tests, no model): each ends in one visible
line on the page, never a traceback, and nothing starts on a value the field does not show."""

from __future__ import annotations

import pytest

from tests.support.pages import ok, page


def plain(markdown: str) -> str:
    """An element's text as the user reads it: the markdown escapes (ui.html.md) taken out."""
    return markdown.replace("\\", "").replace("\u200b", "")


@pytest.mark.parametrize(
    "config, said",
    [
        ('{"architectures": ["LlamaForCausalLM"], "hidden_size": ', "not valid JSON"),
        ("[1, 2]", "config.json"),
    ],
)
def test_a_target_whose_config_does_not_read_is_refused_in_the_sidebar_and_named_on_home(
    db, tmp_path, config, said
):
    folder = tmp_path / "badcfg"
    folder.mkdir()
    (folder / "config.json").write_text(config)
    app = ok(page("home").run())
    app = ok(app.sidebar.text_input(key="sidebar_target").set_value(str(folder)).run())  # raised before
    (error,) = [plain(e.value) for e in app.sidebar.error]
    assert str(folder) in error and said in error
    assert app.sidebar.selectbox(key="sidebar_draft")  # the rest of the sidebar still draws
    assert any(c.value.startswith("No usable target is active") for c in app.caption)


def test_a_file_given_as_the_target_is_called_a_file(db, tmp_path):
    afile = tmp_path / "weights.safetensors"
    afile.write_bytes(b"x")
    app = ok(page("home").run())
    app = ok(app.sidebar.text_input(key="sidebar_target").set_value(str(afile)).run())
    assert "a file, not a model directory" in plain(app.sidebar.error[0].value)


def test_a_ray_address_that_is_not_one_is_refused_before_anything_starts(db):
    app = ok(page("3_Compare").run())
    app = ok(app.text_input(key="compare_ray").set_value("<img src=x onerror=alert(1)> **x**").run())
    app = ok(app.button(key="compare_start_batch").click().run())  # Ray's ValueError, a traceback, before
    (error,) = [e.value for e in app.error]
    assert "not 'local', 'auto', host:port or ray://host:port" in plain(error)
    assert "\\*\\*x\\*\\*" in error  # shown literally, not as bold
    assert "compare_task" not in app.session_state


def test_a_sample_number_out_of_range_blocks_start_and_says_the_range(db):
    app = ok(page("2_Decode").run())
    app = ok(app.number_input(key="decode_index").set_value(9999).run())
    assert any("Sample #9999: this dataset has samples 0 to" in e.value for e in app.error)
    app = ok(app.button(key="decode_start").click().run())
    assert "decode_task" not in app.session_state
    app = ok(app.number_input(key="decode_index").set_value(-3).run())
    assert any("Sample #-3" in e.value for e in app.error)


def test_a_typed_override_is_shown_literally_with_an_example(db):
    app = ok(page("2_Decode").run())
    app = ok(app.text_input(key="decode_aux_hf_indices").set_value("**x**").run())
    app = ok(app.button(key="decode_start").click().run())
    (error,) = [e.value for e in app.error]
    assert "\\*\\*x\\*\\*" in error and "e.g. 2,15,27" in plain(error)


def test_a_number_out_of_range_is_said_under_its_field_and_starts_nothing(db):
    """Every bounded number on the pages (ui/numbers.whole): with widget bounds the browser kept the typed
    number on screen while the page went on with the last good one."""
    app = ok(page("3_Compare").run())
    app = ok(app.number_input(key="compare_steps").set_value(99).run())
    assert any(
        plain(e.value) == "K (draft steps): 99 is outside 1 to 64." for e in app.error
    )  # the setting's
    assert app.button(key="compare_start_one").disabled and app.button(key="compare_start_batch").disabled
    app = ok(app.number_input(key="compare_steps").set_value(3).run())
    assert not app.error and not app.button(key="compare_start_one").disabled
    app = ok(page("4_Diagnostics").run())
    app = ok(app.number_input(key="diagnose_n").set_value(0).run())
    assert any(plain(e.value).startswith("Samples: 0 is outside 1 to") for e in app.error)
    assert app.button(key="diagnose_run").disabled
