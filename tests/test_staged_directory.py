"""paths.staged_directory: a directory written beside its final place and
renamed into it, so a reader finds all of it or none."""

import pytest

from resources.paths import staged_directory


def test_the_directory_appears_whole_when_the_block_ends(tmp_path):
    final = tmp_path / "out" / "pool"
    with staged_directory(final) as staging:
        (staging / "a.txt").write_text("a")
        assert not final.exists() and staging.parent == final.parent
    assert (final / "a.txt").read_text() == "a"
    assert sorted(p.name for p in final.parent.iterdir()) == ["pool"]  # no staging left beside it


def test_a_block_that_raises_leaves_nothing_and_keeps_what_was_there(tmp_path):
    final = tmp_path / "bundle"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with pytest.raises(RuntimeError, match="half written"):
        with staged_directory(final, replace=True) as staging:
            (staging / "new.txt").write_text("new")
            raise RuntimeError("half written")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]
    assert sorted(p.name for p in final.iterdir()) == ["old.txt"]


def test_replace_swaps_the_old_directory_for_the_new(tmp_path):
    final = tmp_path / "bundle"
    final.mkdir()
    (final / "old.txt").write_text("old")
    with staged_directory(final, replace=True) as staging:
        (staging / "new.txt").write_text("new")
    assert sorted(p.name for p in final.iterdir()) == ["new.txt"]


def test_an_existing_directory_is_refused_unless_replacing(tmp_path):
    final = tmp_path / "pool"
    final.mkdir()
    with pytest.raises(FileExistsError, match="pool already exists"):
        with staged_directory(final):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pool"]
