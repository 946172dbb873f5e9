from studies.render import read_section, write_section


def test_write_section_appends_then_replaces_and_keeps_the_rest(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# Results\n\nhand-written intro\n")
    write_section("mcm-study", "## MCM\n\nfirst", source="a.py", page=page)
    write_section("tpu", "## TPU\n\nx", source="b.py", page=page)
    write_section("mcm-study", "## MCM\n\nsecond", source="a.py", page=page)
    text = page.read_text()
    assert text.startswith("# Results\n\nhand-written intro\n")
    assert "first" not in text and text.count("## MCM") == 1
    assert text.index("## MCM") < text.index("## TPU")
    assert read_section("mcm-study", page) == "## MCM\n\nsecond"
    assert read_section("tpu", page) == "## TPU\n\nx"
    assert read_section("absent", page) is None


def test_section_names_are_checked(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="section name"):
        write_section("Bad Name", "x", source="a.py", page=tmp_path / "r.md")


def test_other_sections_survive_a_rewrite_of_the_head(tmp_path):
    from studies.render import other_sections

    page = tmp_path / "results.md"
    page.write_text("# Results\n\nold head\n")
    write_section("a", "## A\n\none", source="a.py", page=page)
    write_section("b", "## B\n\ntwo", source="b.py", page=page)
    page.write_text("# Results\n\nnew head\n" + other_sections(page))
    assert read_section("a", page) == "## A\n\none" and read_section("b", page) == "## B\n\ntwo"
    assert "old head" not in page.read_text() and other_sections(tmp_path / "none.md") == ""
