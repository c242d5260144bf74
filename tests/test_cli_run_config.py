"""`clawloop run --config FILE`: the launchpad's run config for round_job,
checked before a round starts; a bad file or field is named, and nothing runs."""

import dagster as dg
import pytest
import yaml

from clawloop_assets import cli


@pytest.fixture
def no_round(monkeypatch):
    """Fails the test if a round would start."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"a round started: {args} {kwargs}")

    monkeypatch.setattr(cli, "run_rounds_with", refuse)


def write(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_help_shows_the_config_option(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["run", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--config FILE" in out
    # The example it shows is a valid run config.
    example = out[out.index("resources:"):out.index("Every field")]
    assert yaml.safe_load(example)["resources"]["loop"]["config"]["candidates_per_round"] == 256


@pytest.mark.parametrize("text,named", [
    ("resources:\n  loop:\n    config:\n      temperature: -1\n", "resources.loop.config.temperature"),
    ("resources:\n  loop:\n    config:\n      max_new_tokens: 0\n      torch_threads: 0\n",
     "resources.loop.config.max_new_tokens"),
    ("resources:\n  loop:\n    config:\n      max_turns: three\n", "resources.loop.config.max_turns"),
    ("resources:\n  loop:\n    config:\n      temprature: 0.8\n", "did you mean temperature"),
    ("resources:\n  loop:\n    config:\n      admission_high: 12\n", "admission_high (12)"),
    ("resources:\n  loop:\n    config: [1, 2]\n", "resources.loop.config must be a mapping"),
    ("loop:\n  config:\n    temperature: 0.8\n", "unknown section(s) loop"),
    ("resources: [\n", "not valid YAML (line 2"),
    ("- just\n- a list\n", "a run config is a mapping"),
])
def test_a_bad_file_names_the_file_and_the_field(tmp_path, clawloop_home, no_round, text, named):
    path = write(tmp_path, text)
    with pytest.raises(SystemExit) as refused:
        cli.main(["run", "--config", str(path)])
    message = str(refused.value.code)
    assert str(path) in message and named in message, message
    assert "\n" not in message
    assert not (clawloop_home / "rounds").exists() and not (clawloop_home / "warehouse.duckdb").exists()


def test_a_missing_file_is_named(tmp_path, clawloop_home, no_round):
    with pytest.raises(SystemExit, match=r"--config .*nope\.yaml: cannot read it: No such file"):
        cli.main(["run", "--config", str(tmp_path / "nope.yaml")])


class Launched(Exception):
    pass


@pytest.fixture
def launches(monkeypatch):
    """The run configs round_job is launched with; the launch itself raises Launched."""
    seen = []

    def launch(self, *args, run_config=None, **kwargs):
        seen.append((self.name, kwargs.get("partition_key"), run_config))
        raise Launched

    monkeypatch.setattr(dg.JobDefinition, "execute_in_process", launch)
    return seen


def test_a_good_file_is_the_run_config_of_round_job(tmp_path, clawloop_home, launches):
    config = {"resources": {"loop": {"config": {"candidates_per_round": 256, "round_temperatures": [0.8, 0.9]}}},
              "ops": {}}
    path = write(tmp_path, yaml.safe_dump(config))
    with pytest.raises(Launched):
        cli.main(["run", "--config", str(path), "--policy", "embedded", "--sandbox", "bubblewrap"])
    [(job, key, run_config)] = launches
    assert (job, key) == ("round_job", "round-0001")
    assert run_config["resources"] == config["resources"]
    assert run_config["loggers"] == cli.console_loggers("round-0001")  # the compact console unless the file sets loggers


def test_without_a_file_round_job_gets_the_progress_loggers_alone(clawloop_home, launches):
    with pytest.raises(Launched):
        cli.main(["run"])
    assert launches[0][2] == {"loggers": cli.console_loggers("round-0001")}


def test_a_field_only_round_jobs_schema_knows_is_checked_before_the_round(tmp_path, clawloop_home, launches):
    """Config for another resource (here the sandbox's) is checked against
    round_job's schema, naming the file and the entry, before any launch."""
    path = write(tmp_path, "resources:\n  sandbox:\n    config:\n      no_such_setting: 3\n")
    with pytest.raises(SystemExit) as refused:
        cli.main(["run", "--config", str(path)])
    message = str(refused.value.code)
    assert str(path) in message and "no_such_setting" in message and "Expected:" not in message
    assert launches == []


def test_rounds_policy_and_sandbox_still_reach_the_run(monkeypatch, clawloop_home):
    calls = []
    monkeypatch.setattr(cli, "run_rounds_with", lambda *args: calls.append(args))
    cli.main(["run", "--rounds", "2", "--policy", "openai", "--sandbox", "docker"])
    assert calls == [(2, "openai", "docker", None, None)]
    with pytest.raises(SystemExit) as refused:
        cli.main(["run", "--rounds", "0"])
    assert refused.value.code == 2 and len(calls) == 1
