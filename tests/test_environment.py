"""The CLAWLOOP_* variables, read in one place (resources/environment.py):
their defaults, each variable read as it is set now, invalid values refused
naming the variable, and no other module reading them itself."""

from __future__ import annotations

import ast
import re
from dataclasses import fields
from pathlib import Path

import pytest

from resources import environment
from resources.environment import (
    DEFAULT_BACKENDS,
    DEFAULT_HOME,
    DEFAULT_NIGHTLY_CRON,
    DEFAULT_ROLLOUT_POOL_LIMIT,
    Environment,
    read_environment,
)

REPO = Path(__file__).resolve().parent.parent
# Where a CLAWLOOP_* name may be spelled out: this module, the tests (which set
# the variables), and prose (docs, README, CHANGELOG).
ENVIRONMENT_MODULE = REPO / "resources" / "environment.py"
NOT_SCANNED = {"tests", "docs", "test-artifacts", "__pycache__", "node_modules"}
VARIABLE_NAME = re.compile(r"^CLAWLOOP_[A-Z0-9_]*$")


@pytest.fixture
def clean(monkeypatch):
    """No CLAWLOOP_* variable set."""
    for name in environment.VARIABLES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_every_field_is_a_variable_documented_field_by_field():
    constants = {value for name, value in vars(environment).items()
                 if name.isupper() and isinstance(value, str) and value.startswith("CLAWLOOP_")}
    assert constants == set(environment.VARIABLES)  # a constant per variable, and no other
    for variable in fields(Environment):
        assert VARIABLE_NAME.match(variable.name), variable.name
        assert set(variable.metadata) == {"help", "default", "valid", "docs"}, variable.name
        assert all(variable.metadata.values()), variable.name
        page = variable.metadata["docs"].split(" (")[0]
        assert (REPO / page).is_file(), f"{variable.name}: {page} does not exist"
    others = set(environment.READ_OUTSIDE_PYTHON) | set(environment.READ_BY_TESTS)
    assert all(VARIABLE_NAME.match(name) for name in others)
    assert not others & set(environment.VARIABLES)


def test_defaults(clean):
    env = read_environment()
    assert env == Environment()
    assert all(getattr(env, name) is None for name in environment.VARIABLES)
    assert env.home == DEFAULT_HOME.resolve()
    assert env.model_cache == DEFAULT_HOME.resolve() / "models"
    assert env.profile == "laptop"
    for profile, backends in DEFAULT_BACKENDS.items():
        assert {variable: env.backend(variable, profile) for variable in backends} == backends
    assert env.backend(environment.POLICY, "laptop") == "embedded"
    assert env.backend(environment.TRAINING_LAUNCHER, "production") == "k8s"
    assert env.policy_url == ""
    assert env.trainer_pods == {}
    assert env.rollout_pool_limit == DEFAULT_ROLLOUT_POOL_LIMIT == 2
    assert env.nightly_cron == DEFAULT_NIGHTLY_CRON == "0 2 * * *"
    assert env.given(environment.POLICY, "embedded") == "embedded"


def test_each_variable_is_read_when_asked_not_at_import(clean, tmp_path):
    values = {name: f"value-of-{name.lower()}" for name in environment.VARIABLES}
    for name, value in values.items():
        clean.setenv(name, value)
    env = read_environment()
    assert {name: getattr(env, name) for name in environment.VARIABLES} == values
    # What each gives its caller.
    valid = {environment.HOME: str(tmp_path / "home"), environment.MODEL_CACHE: "~/cache",
             environment.PROFILE: "production", environment.POLICY: "embedded", environment.SANDBOX: "docker",
             environment.TRAINING_LAUNCHER: "docker", environment.POLICY_URL: "http://127.0.0.1:8011/v1",
             environment.K8S_NAMESPACE: "clawloop", environment.K8S_SERVICE_ACCOUNT: "trainer",
             environment.TRAINER_IMAGE: "registry.example.com/trainer:1", environment.ROLLOUT_POOL_LIMIT: "5",
             environment.NIGHTLY_CRON: "30 3 * * 1-5"}
    for name, value in valid.items():
        clean.setenv(name, value)
    env = read_environment()
    assert env.home == tmp_path / "home"
    assert env.model_cache == Path("~/cache").expanduser().resolve()
    assert env.profile == "production"
    assert env.backend(environment.POLICY, "production") == "embedded"  # the variable beats the profile
    assert env.backend(environment.SANDBOX, "laptop") == "docker"
    assert env.backend(environment.TRAINING_LAUNCHER, "laptop") == "docker"
    assert env.policy_url == "http://127.0.0.1:8011/v1"
    assert env.trainer_pods == {"namespace": "clawloop", "service_account": "trainer",
                                "image": "registry.example.com/trainer:1"}
    assert env.rollout_pool_limit == 5
    assert env.nightly_cron == "30 3 * * 1-5"
    assert env.given(environment.POLICY, "vllm") == "embedded"
    # Empty counts as unset for a path, a profile, a pool limit, a cron and the K8s settings.
    for name in (environment.HOME, environment.MODEL_CACHE, environment.PROFILE, environment.ROLLOUT_POOL_LIMIT,
                 environment.NIGHTLY_CRON, environment.K8S_NAMESPACE, environment.POLICY_URL):
        clean.setenv(name, "")
    env = read_environment()
    assert (env.home, env.model_cache, env.profile) == (DEFAULT_HOME.resolve(), DEFAULT_HOME.resolve() / "models",
                                                        "laptop")
    assert (env.rollout_pool_limit, env.nightly_cron, env.policy_url) == (2, DEFAULT_NIGHTLY_CRON, "")
    assert "namespace" not in env.trainer_pods


def test_the_paths_follow_the_variables_set_at_run_time(clean, tmp_path):
    from resources import paths

    clean.setenv(environment.HOME, str(tmp_path / "a"))
    assert paths.clawloop_home() == tmp_path / "a"
    assert paths.model_cache_dir() == tmp_path / "a" / "models"
    clean.setenv(environment.MODEL_CACHE, str(tmp_path / "models"))
    assert paths.model_cache_dir() == tmp_path / "models"


@pytest.mark.parametrize("variable, value, message", [
    ("CLAWLOOP_PROFILE", "cloud", "CLAWLOOP_PROFILE='cloud' is unknown; choose one of ['laptop', 'production']"),
    ("CLAWLOOP_POLICY", "vllm", "CLAWLOOP_POLICY='vllm' is unknown; choose one of ['embedded', 'openai']"),
    ("CLAWLOOP_SANDBOX", "chroot", "CLAWLOOP_SANDBOX='chroot' is unknown; choose one of ['bubblewrap', 'docker']"),
    ("CLAWLOOP_SANDBOX", "", "CLAWLOOP_SANDBOX='' is unknown"),
    ("CLAWLOOP_TRAINING_LAUNCHER", "slurm",
     "CLAWLOOP_TRAINING_LAUNCHER='slurm' is unknown; choose one of ['docker', 'k8s', 'subprocess']"),
    ("CLAWLOOP_ROLLOUT_POOL_LIMIT", "0", "CLAWLOOP_ROLLOUT_POOL_LIMIT='0' must be a whole number of rollout steps"),
    ("CLAWLOOP_ROLLOUT_POOL_LIMIT", "many", "CLAWLOOP_ROLLOUT_POOL_LIMIT='many' must be a whole number"),
    ("CLAWLOOP_ROLLOUT_POOL_LIMIT", "-3", "CLAWLOOP_ROLLOUT_POOL_LIMIT='-3' must be a whole number"),
    ("CLAWLOOP_NIGHTLY_CRON", "every night", "CLAWLOOP_NIGHTLY_CRON='every night' is not a cron string"),
])
def test_an_invalid_value_is_refused_naming_the_variable(clean, variable, value, message):
    clean.setenv(variable, value)
    env = read_environment()  # reading never fails: a value is checked when it is used
    use = {
        "CLAWLOOP_PROFILE": lambda: env.profile,
        "CLAWLOOP_POLICY": lambda: env.backend(variable, "laptop"),
        "CLAWLOOP_SANDBOX": lambda: env.backend(variable, "laptop"),
        "CLAWLOOP_TRAINING_LAUNCHER": lambda: env.backend(variable, "laptop"),
        "CLAWLOOP_ROLLOUT_POOL_LIMIT": lambda: env.rollout_pool_limit,
        "CLAWLOOP_NIGHTLY_CRON": lambda: env.nightly_cron,
    }[variable]
    with pytest.raises(ValueError, match=re.escape(message)):
        use()
    # The other values are still usable.
    assert env.home == DEFAULT_HOME.resolve()


def test_an_unknown_profile_passed_in_is_refused():
    with pytest.raises(ValueError, match=re.escape("CLAWLOOP_PROFILE='cloud' is unknown")):
        Environment().backend(environment.SANDBOX, "cloud")


def test_the_definitions_map_every_backend_name_and_profile():
    from clawloop_assets.definitions import (
        INSTANCE_YAML_BY_PROFILE,
        POLICY_BACKENDS,
        SANDBOX_BACKENDS,
        TRAINING_LAUNCHERS,
    )
    from clawloop_assets.schedules import NIGHTLY_STATUS_BY_PROFILE

    assert set(POLICY_BACKENDS) == set(environment.POLICY_BACKENDS)
    assert set(SANDBOX_BACKENDS) == set(environment.SANDBOX_BACKENDS)
    assert set(TRAINING_LAUNCHERS) == set(environment.TRAINING_LAUNCHERS)
    assert set(INSTANCE_YAML_BY_PROFILE) == set(NIGHTLY_STATUS_BY_PROFILE) == set(DEFAULT_BACKENDS) \
        == set(environment.PROFILES)


def python_sources() -> list[Path]:
    """The repository's Python files, less the environment module and tests."""
    found = []
    for path in sorted(REPO.rglob("*.py")):
        parts = path.relative_to(REPO).parts
        if path == ENVIRONMENT_MODULE or NOT_SCANNED & set(parts) or any(p.startswith(".") for p in parts) \
                or "venv" in parts[0]:
            continue
        found.append(path)
    return found


def variable_names_spelled_out(path: Path) -> list[str]:
    """`file:line: 'CLAWLOOP_X'` for each string in the code that is a CLAWLOOP_*
    name (or its start): os.environ.get("CLAWLOOP_X"), os.getenv(...),
    os.environ["CLAWLOOP_X"], {"CLAWLOOP_X": ...}. Prose in docstrings and
    messages is longer than a name, and passes."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{path.relative_to(REPO)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and VARIABLE_NAME.match(node.value)]


def test_no_other_module_reads_a_clawloop_variable():
    sources = python_sources()
    assert REPO / "clawloop_assets" / "cli.py" in sources and REPO / "resources" / "paths.py" in sources
    offenders = [hit for path in sources for hit in variable_names_spelled_out(path)]
    assert not offenders, ("read CLAWLOOP_* variables through resources/environment.py (read_environment() and "
                           "its names), not here:\n" + "\n".join(offenders))


def test_every_clawloop_variable_the_project_mentions_is_listed():
    """A variable named in code, configuration or docs (tests aside) is one
    this module reads or lists as read elsewhere."""
    known = set(environment.VARIABLES) | set(environment.READ_OUTSIDE_PYTHON) | set(environment.READ_BY_TESTS)
    mentioned = {}
    for path in sorted(REPO.rglob("*")):
        parts = path.relative_to(REPO).parts
        if not path.is_file() or parts[0] in ("tests", "test-artifacts") or "venv" in parts[0] \
                or any(p.startswith(".") or p == "__pycache__" for p in parts):
            continue
        if path.suffix not in (".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt") and path.name != "Makefile":
            continue
        for name in re.findall(r"CLAWLOOP_[A-Z0-9_]*\*?", path.read_text(encoding="utf-8", errors="replace")):
            if not name.endswith(("*", "_")):  # CLAWLOOP_K8S_* names a group
                mentioned.setdefault(name, str(path.relative_to(REPO)))
    unknown = {name: where for name, where in mentioned.items() if name not in known}
    assert not unknown, f"not in resources/environment.py: {unknown}"


def test_the_settings_page_links_every_home_that_exists():
    page = REPO / "docs" / "settings.md"
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8"))
    assert "../resources/environment.py" in links and "../clawloop_assets/loop_config.py" in links
    missing = [link for link in links if not (page.parent / link).exists()]
    assert not missing, missing
    assert "docs/settings.md" in (REPO / "README.md").read_text(encoding="utf-8")
