"""A $CLAWLOOP_HOME that cannot be written (read-only, full, not a directory)
is one line naming the path and the cause, before anything runs, and what
the home holds is left as it was."""

import errno
import os
import shutil
import subprocess
import sys

import pytest

from clawloop_assets import cli
from resources import paths


@pytest.fixture
def nothing_runs(monkeypatch):
    """Fails the test if a round or the model's preparation would start."""
    def refuse(*args, **kwargs):
        raise AssertionError("went on past an unwritable home")

    monkeypatch.setattr(cli, "run_rounds_with", refuse)
    monkeypatch.setattr("resources.embedded_model.ensure_base_model", refuse)
    monkeypatch.setattr("resources.sandbox.BubblewrapSandbox._bwrap", lambda self: "bwrap")


@pytest.fixture
def read_only_home(tmp_path):
    """(home, how to run the CLI on it, the cause it must name): a home
    holding a warehouse file that the CLI cannot write. As root (which
    ignores modes), the home is a read-only bind mount in a mount namespace of
    the CLI's own; otherwise its mode is read-only."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "warehouse.duckdb").write_bytes(b"stored rounds")
    if os.geteuid() != 0:
        home.chmod(0o555)
        yield home, [sys.executable, "-m", "clawloop_assets.cli"], "Permission denied"
        home.chmod(0o755)
        return
    unshare = shutil.which("unshare")
    probe = unshare and subprocess.run([unshare, "-m", "true"], capture_output=True)
    if not probe or probe.returncode != 0:
        pytest.fail("running as root, `unshare -m` (util-linux) is needed to make a read-only home: "
                    "apt-get install util-linux")
    wrapper = ('mount --bind -o ro "$CLAWLOOP_HOME" "$CLAWLOOP_HOME" && exec "$0" "$@"')
    yield home, [unshare, "-m", "sh", "-c", wrapper, sys.executable, "-m", "clawloop_assets.cli"], "Read-only file system"


def run_cli(prefix, *args, home):
    env = {**os.environ, "CLAWLOOP_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([*prefix, *args], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [["run"], ["setup"], ["run", "--rounds", "2", "--policy", "openai"]])
def test_a_read_only_home_is_one_line_naming_it(read_only_home, command):
    home, prefix, cause = read_only_home
    done = run_cli(prefix, *command, home=home)
    assert done.returncode != 0
    assert done.stderr.strip() == f"clawloop: cannot write to $CLAWLOOP_HOME ({home}): {cause}"
    assert (home / "warehouse.duckdb").read_bytes() == b"stored rounds"
    assert sorted(p.name for p in home.iterdir()) == ["warehouse.duckdb"]


def test_a_full_home_is_one_line_naming_it(clawloop_home, monkeypatch, nothing_runs):
    """A full disk may accept the file and refuse only the data (at fsync)."""
    clawloop_home.mkdir(parents=True)
    (clawloop_home / "warehouse.duckdb").write_bytes(b"stored rounds")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    for command in (["run"], ["setup"]):
        with pytest.raises(SystemExit) as refused:
            cli.main(command)
        assert refused.value.code == f"clawloop: cannot write to $CLAWLOOP_HOME ({clawloop_home}): No space left on device"
    assert sorted(p.name for p in clawloop_home.iterdir()) == ["warehouse.duckdb"]  # the probe is gone
    assert (clawloop_home / "warehouse.duckdb").read_bytes() == b"stored rounds"


def test_a_home_below_a_file_is_one_line_naming_it(tmp_path, monkeypatch, nothing_runs):
    (tmp_path / "afile").write_text("")
    home = tmp_path / "afile" / "home"
    monkeypatch.setenv("CLAWLOOP_HOME", str(home))
    for command in (["run"], ["setup"], ["transfer", "--pool", str(tmp_path), "--out", str(tmp_path / "out")]):
        with pytest.raises(SystemExit) as refused:
            cli.main(command)
        assert refused.value.code == f"clawloop: cannot write to $CLAWLOOP_HOME ({home}): Not a directory"


def test_an_unwritable_dagster_home_is_named_too(tmp_path, monkeypatch, nothing_runs):
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("CLAWLOOP_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "afile" / "dagster"))
    with pytest.raises(SystemExit) as refused:
        cli.main(["run"])
    assert refused.value.code == f"clawloop: cannot write to $DAGSTER_HOME ({tmp_path / 'afile' / 'dagster'}): Not a directory"


def test_a_writable_home_passes_and_keeps_what_it_holds(clawloop_home):
    clawloop_home.mkdir(parents=True)
    (clawloop_home / "warehouse.duckdb").write_bytes(b"stored rounds")
    paths.check_writable(clawloop_home)
    assert [p.name for p in clawloop_home.iterdir()] == ["warehouse.duckdb"]
    paths.check_writable(clawloop_home / "new" / "dir")  # created, as a first run would
    assert (clawloop_home / "new" / "dir").is_dir() and not any((clawloop_home / "new" / "dir").iterdir())
