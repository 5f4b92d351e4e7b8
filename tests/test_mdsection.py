"""benchmarks/mdsection.py: a benchmark's section is replaced where it stands, so docs/benchmarks.md keeps its order
whichever benchmark ran last; a new section is appended."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from mdsection import write_section  # noqa: E402


def test_a_section_is_replaced_in_place_and_a_new_one_appended(tmp_path):
    doc = tmp_path / "b.md"
    doc.write_text("# Benchmarks\n\n## One\n\nold one\n\n## Two\n\ntwo\n\n## Three\n\nthree\n")
    write_section(str(doc), "## Two\n\nnew two\nmore")
    assert doc.read_text() == "# Benchmarks\n\n## One\n\nold one\n\n## Two\n\nnew two\nmore\n\n## Three\n\nthree\n"
    write_section(str(doc), "## Three\n\nnew three")
    assert doc.read_text().endswith("## Two\n\nnew two\nmore\n\n## Three\n\nnew three\n")
    write_section(str(doc), "## Four\n\nfour")
    assert doc.read_text().endswith("## Three\n\nnew three\n\n## Four\n\nfour\n")
    write_section(str(tmp_path / "new.md"), "## Only\n\nx")
    assert (tmp_path / "new.md").read_text() == "# Benchmarks\n\n## Only\n\nx\n"


def test_a_heading_that_begins_another_is_told_apart(tmp_path):
    doc = tmp_path / "b.md"
    doc.write_text("# Benchmarks\n\n## Memory: gpt2, buckets\n\nlong\n\n## Memory: gpt2\n\nshort\n")
    write_section(str(doc), "## Memory: gpt2\n\nnew short")
    assert doc.read_text() == "# Benchmarks\n\n## Memory: gpt2, buckets\n\nlong\n\n## Memory: gpt2\n\nnew short\n"
