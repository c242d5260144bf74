"""`clawloop`: prepare this machine, and run rounds of the loop through the
Dagster instance under $CLAWLOOP_HOME (so the UI shows every run)."""

from __future__ import annotations

import argparse
import difflib
import json
import os
import shutil
import sys
from pathlib import Path

from resources import paths
from resources.environment import POLICY, POLICY_URL, PROFILE, SANDBOX, read_environment

REPO_ROOT = Path(__file__).resolve().parent.parent


def prepare_dagster_home() -> Path:
    """$DAGSTER_HOME with the profile's instance config as dagster.yaml. A
    copy of another profile's shipped file is replaced (the profile changed);
    one edited by hand is kept. Production also writes the pool limits into
    the instance, which must then store its runs in Postgres."""
    from clawloop_assets.definitions import INSTANCE_YAML_BY_PROFILE, apply_pool_limits, current_profile

    profile = current_profile()
    home = paths.dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    target, source = home / "dagster.yaml", REPO_ROOT / INSTANCE_YAML_BY_PROFILE[profile]
    shipped = {(REPO_ROOT / name).read_bytes() for name in INSTANCE_YAML_BY_PROFILE.values()}
    if not target.exists() or (target.read_bytes() in shipped and target.read_bytes() != source.read_bytes()):
        shutil.copy(source, target)
    os.environ["DAGSTER_HOME"] = str(home)
    if profile == "production":
        import dagster as dg

        missing = [v for v in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME", "DAGSTER_PG_PASSWORD",
                               "DAGSTER_PG_DB") if v not in os.environ]
        if missing:
            raise SystemExit(f"{PROFILE}=production keeps the Dagster instance in Postgres: set {', '.join(missing)}")
        with dg.DagsterInstance.from_config(str(home)) as instance:
            storage = type(instance.run_storage).__name__
            if storage != "PostgresRunStorage":
                raise SystemExit(f"{target} stores runs in {storage}, not Postgres: it was edited by hand; "
                                 f"replace it with {source} for {PROFILE}=production")
            apply_pool_limits(instance)
    return home


def setup() -> None:
    from resources.embedded_model import ensure_base_model
    from resources.sandbox import BubblewrapSandbox

    BubblewrapSandbox()._bwrap()  # raises with the fix when bubblewrap is missing
    print(f"base model: {ensure_base_model(paths.model_cache_dir())}")
    from clawloop_assets.harbor.toolchain import ensure_toolchain

    print(f"harbor toolchain: {ensure_toolchain().root}")
    print(f"dagster home: {prepare_dagster_home()}")


def next_round_key() -> str:
    """The round after the last completed one; an unfinished round is rerun."""
    from clawloop_assets.partitions import round_after
    from resources.warehouse import DuckDBWarehouse

    return round_after(DuckDBWarehouse().read("round_summaries")["round"].to_list())


def why_stopped(result) -> str:
    """The failed gate checks (with their metadata) and failed steps of a run."""
    reasons = []
    for event in result.get_asset_check_evaluations():
        if not event.passed:
            details = {k: v.value for k, v in event.metadata.items()}
            reasons.append(f"gate {event.check_name} failed {details}")
    for event in result.all_events:
        if event.is_step_failure:
            error = event.event_specific_data.error
            while error.cause is not None:  # the user's exception, not Dagster's wrapper
                error = error.cause
            reasons.append(f"step {event.step_key} failed: {error.message.strip()}")
        elif event.is_resource_init_failure and event.event_specific_data.error is not None:
            # e.g. the warehouse's run lock held by another run: no step ran.
            error = event.event_specific_data.error
            while error.cause is not None:
                error = error.cause
            reasons.append(f"resources did not start: {error.message.strip()}")
    return "; ".join(reasons) or "unknown reason"


# The top-level sections of a run config for round_job, as the launchpad shows them.
RUN_CONFIG_SECTIONS = ("resources", "ops", "loggers", "execution")


def console_loggers(round_key: str) -> dict:
    """The loggers of a round run unless the run config sets its own: steps
    and progress on the console, everything in the round's run.log
    (clawloop_assets/console.py)."""
    return {"clawloop_console": {"config": {"log_file": str(paths.round_dir(round_key) / "run.log"),
                                            "round": round_key}}}

RUN_CONFIG_EXAMPLE = """\
--config FILE takes the YAML run config the Dagster launchpad takes for
round_job, e.g.:

  resources:
    loop:
      config:
        candidates_per_round: 256
        round_temperatures: [0.7, 0.95]
        temperature: 0.7

Every field of `loop` is in clawloop_assets/loop_config.py (and in the
launchpad's schema); each is checked before a round starts. The same config
applies to every round of the command.
"""


def validation_messages(exc, prefix: str = "") -> list[str]:
    """One line per error of a pydantic ValidationError: the field's dotted
    path (after `prefix`), what is wrong, and the value given."""
    lines = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"])
        where = ".".join(part for part in (prefix, field) if part)
        message = error["msg"].removeprefix("Value error, ")
        given = f" (got {error['input']!r})" if error["loc"] and error["type"] != "missing" else ""
        lines.append(f"{where}: {message}{given}" if where else message)
    return lines


def load_run_config(path: Path) -> dict:
    """The run config in `path`, with its `loop` config checked as the resource
    will check it; SystemExit naming the file and the field otherwise."""
    import yaml
    from pydantic import ValidationError

    from clawloop_assets.loop_config import LoopConfig

    def refuse(why: str):
        raise SystemExit(f"clawloop run: --config {path}: {why}")

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        refuse(f"cannot read it: {getattr(exc, 'strerror', None) or exc}")
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        refuse(f"not valid YAML{f' (line {mark.line + 1}, column {mark.column + 1})' if mark else ''}: "
               f"{getattr(exc, 'problem', None) or exc}")
    config = {} if config is None else config
    if not isinstance(config, dict):
        refuse(f"a run config is a mapping of {', '.join(RUN_CONFIG_SECTIONS)}; got a {type(config).__name__}")
    unknown = sorted(str(key) for key in config if key not in RUN_CONFIG_SECTIONS)
    if unknown:
        refuse(f"unknown section(s) {', '.join(unknown)}; a run config holds {', '.join(RUN_CONFIG_SECTIONS)}")
    where = "resources.loop.config"
    loop = config
    for key in where.split("."):
        loop = loop.get(key) if isinstance(loop, dict) else None
        if loop is None:
            return config  # no loop config: the defaults
    if not isinstance(loop, dict):
        refuse(f"{where} must be a mapping of LoopConfig fields, got {loop!r}")
    unknown = sorted(str(name) for name in loop if name not in LoopConfig.model_fields)
    for name in unknown:
        close = difflib.get_close_matches(name, LoopConfig.model_fields, n=1)
        refuse(f"{where}.{name}: not a LoopConfig field{f' (did you mean {close[0]}?)' if close else ''}")
    # A value read from the environment ({env: VAR}) is Dagster's to resolve; it is checked when the resource starts.
    given = {name: value for name, value in loop.items() if not (isinstance(value, dict) and set(value) == {"env"})}
    try:
        LoopConfig(**given)
    except ValidationError as exc:
        refuse("; ".join(validation_messages(exc, where)))
    except TypeError as exc:  # e.g. a non-string key
        refuse(f"{where}: {exc}")
    return config


def check_home_writable(*, dagster: bool = False) -> None:
    """SystemExit with one line naming the path and the cause when
    $CLAWLOOP_HOME (and with `dagster`, $DAGSTER_HOME) cannot be written."""
    homes = [("$CLAWLOOP_HOME", paths.clawloop_home())]
    if dagster:
        homes.append(("$DAGSTER_HOME", paths.dagster_home()))
    for name, home in homes:
        try:
            paths.check_writable(home)
        except OSError as exc:
            raise SystemExit(f"clawloop: cannot write to {name} ({home}): {exc.strerror or exc}") from None


def run_rounds_with(count: int, policy: str, sandbox: str, run_config: dict | None = None,
                    config_path: Path | None = None) -> list[dict]:
    """Run rounds on the chosen backends. `vllm` starts a local vLLM server
    (from `make vllm-backend`'s environment) for the duration and points the
    OpenAI-compatible policy at it. `run_config` (from `config_path`) is the
    launchpad's run config for round_job."""
    os.environ[SANDBOX] = sandbox
    if sandbox == "docker":
        from resources.sandbox import DockerSandbox

        DockerSandbox().check_available()  # raises with the fix before a round starts
    if policy != "vllm":
        os.environ[POLICY] = policy
        return run_rounds(count, run_config, config_path)
    from resources.embedded_model import ensure_base_model
    from resources.vllm_server import VLLMServer

    with VLLMServer() as server:
        print(f"starting the vLLM server (log: {server.log_path})", flush=True)
        os.environ[POLICY_URL] = server.start(ensure_base_model(paths.model_cache_dir()))
        os.environ[POLICY] = "openai"
        return run_rounds(count, run_config, config_path)


def run_rounds(count: int, run_config: dict | None = None, config_path: Path | None = None) -> list[dict]:
    prepare_dagster_home()
    import dagster as dg

    from clawloop_assets.console import round_screen, warnings_to
    from clawloop_assets.definitions import defs
    from clawloop_assets.partitions import round_partitions

    job = defs.resolve_job_def("round_job")
    own_loggers = "loggers" in (run_config or {})
    run_config = {"loggers": console_loggers(next_round_key()), **(run_config or {})}
    try:
        # The whole config against round_job's schema (the backends' resources too), before a round starts.
        dg.validate_run_config(job, run_config)
    except dg.DagsterInvalidConfigError as exc:
        source = f"--config {config_path}" if config_path else "the run config"
        # Dagster's message, less the whole expected schema it appends.
        reasons = [error.message.split(" Expected: ")[0] for error in exc.errors]
        raise SystemExit(f"clawloop run: {source}: " + "; ".join(reasons)) from None
    summaries = []
    with dg.DagsterInstance.get() as instance:
        for _ in range(count):
            key = next_round_key()
            if not instance.has_dynamic_partition(round_partitions.name, key):
                instance.add_dynamic_partitions(round_partitions.name, [key])
            print(f"== {key} ==", flush=True)
            if not own_loggers:
                run_config = {**run_config, "loggers": console_loggers(key)}
            log = paths.round_dir(key) / "run.log"
            with warnings_to(log):
                result = job.execute_in_process(
                    instance=instance,
                    partition_key=key,
                    raise_on_error=False,
                    run_config=run_config,
                )
            if not result.success:
                raise SystemExit(f"{key} stopped: {why_stopped(result)}. The full log: {log}; "
                                 "the run in the Dagster UI (make ui).")
            summary = json.loads((paths.round_dir(key) / "summary.json").read_text())
            print(round_screen(summary, paths.round_dir(key)), flush=True)
            summaries.append(summary)
    return summaries


def transfer_to_base(pool: Path, base_checkpoint: Path | None, out: Path, samples: int) -> dict:
    """`clawloop transfer` on the configured policy and sandbox backends."""
    from clawloop_assets.definitions import resources_for
    from clawloop_assets.training.transfer import transfer_rl_only

    resources = resources_for(read_environment().profile)
    policy, loop = resources["policy"], resources["loop"]
    summary = transfer_rl_only(pool, base_checkpoint or policy.base_checkpoint(), out, policy, resources["sandbox"],
                               loop.agent_settings(), loop.training_job_config("grpo"), loop.seed, samples=samples)
    print(json.dumps(summary, indent=2))
    return summary


def evaluate_task_dir(directory: Path, checkpoint: str | None, samples: int | None,
                      sandbox_backend: str | None = None) -> None:
    """`clawloop eval` on the configured policy backend and the sandbox
    backend asked for (default: the configured one)."""
    import tempfile

    from clawloop_assets.assets.evaluation import evaluation_sampling_seed
    from clawloop_assets.definitions import resources_for
    from clawloop_assets.evaluation.task_dir import (
        EvalError,
        evaluate_tasks,
        load_eval_tasks,
        not_evaluated,
        render_eval,
        resolve_checkpoint,
    )
    from resources.checkpoints import CheckpointError, checkpoint_id
    from resources.warehouse import DuckDBWarehouse

    resources = resources_for(read_environment().profile)
    policy, loop, sandbox = resources["policy"], resources["loop"], resources["sandbox"]
    if sandbox_backend is not None:
        from resources.sandbox import BubblewrapSandbox, DockerSandbox

        sandbox = (DockerSandbox(cpu_shares=read_environment().docker_cpu_shares) if sandbox_backend == "docker"
                   else BubblewrapSandbox())
    try:
        tasks = load_eval_tasks(directory, sandbox)
        path = resolve_checkpoint(checkpoint, policy, DuckDBWarehouse)
        ident = checkpoint_id(path)
    except (EvalError, CheckpointError) as exc:
        raise SystemExit(f"clawloop eval: {exc}") from None
    print(f"{len(tasks)} task(s) from {directory}, checkpoint {ident} ({path})", flush=True)
    session = policy.load(path)
    try:
        with tempfile.TemporaryDirectory(prefix="clawloop-eval-") as workdir:
            report = evaluate_tasks(session, sandbox, tasks, ident, samples or loop.evaluation_samples,
                                    loop.agent_settings(), Path(workdir), evaluation_sampling_seed(loop),
                                    progress=lambda message: print(message, flush=True))
    except EvalError as exc:
        raise SystemExit(f"clawloop eval: {exc}") from None
    finally:
        session.close()
    print(render_eval(report), end="")
    left_out = not_evaluated(directory, sandbox)
    if left_out:
        print(left_out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="clawloop", description=__doc__)
    environment = read_environment()  # the backend options' defaults: $CLAWLOOP_POLICY, $CLAWLOOP_SANDBOX
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("setup", help="check the sandbox and prepare the embedded model")
    run = commands.add_parser("run", help="run the next round(s) of the loop", epilog=RUN_CONFIG_EXAMPLE,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("--rounds", type=int, default=1)
    run.add_argument("--config", type=Path, metavar="FILE",
                     help="a YAML run config for round_job, the one the Dagster launchpad takes (see below)")
    run.add_argument("--policy", choices=["embedded", "vllm", "openai"], default=environment.given(POLICY, "embedded"),
                     help="embedded: transformers in-process; vllm: start a local vLLM server for the run; "
                          "openai: the server at $CLAWLOOP_POLICY_URL")
    run.add_argument("--sandbox", choices=["bubblewrap", "docker"], default=environment.given(SANDBOX, "bubblewrap"))
    export = commands.add_parser("export-pool", help="copy a round's admitted tasks, with their splits, to a directory")
    export.add_argument("--round", required=True, help="round key, e.g. round-0001")
    export.add_argument("--out", type=Path, required=True, help="a directory that does not exist yet")
    transfer = commands.add_parser("transfer", help="train a base model on an exported pool, RL only (GRPO on its own rollouts)")
    transfer.add_argument("--pool", type=Path, required=True, help="a directory written by export-pool")
    transfer.add_argument("--base-checkpoint", type=Path, help="a verified checkpoint; default: the embedded base model")
    transfer.add_argument("--out", type=Path, required=True)
    transfer.add_argument("--samples", type=int, default=8, help="rollouts per task (the GRPO group size)")
    lineage_parser = commands.add_parser("lineage", help="print the chain pattern -> failure summaries -> trajectories -> "
                                                         "tasks -> generators -> capability -> domain through an id")
    lineage_parser.add_argument("id", help="a pattern, failure summary, trajectory (rollout), task or generator id "
                                           "(a generator id repeats each round: qualify it as round-000N.<id>)")
    harbor_import = commands.add_parser("harbor-import", help="import Harbor-format tasks (one task or a directory of "
                                                              "them) as bundles; lists those not runnable here, and why")
    harbor_import.add_argument("src", type=Path)
    harbor_import.add_argument("--dest", type=Path, help="default: $CLAWLOOP_HOME/evaluation/imported")
    harbor_import.add_argument("--sandbox", choices=["bubblewrap", "docker"],
                               default=environment.given(SANDBOX, "bubblewrap"),
                               help="the sandbox the tasks will run in, probed for what they need")
    harbor_import.add_argument("--oracle-timeout", type=float, default=None,
                               help="seconds each task's oracle may run while it is validated "
                                    "(default: the task's agent timeout, at most 600)")
    harbor_import.add_argument("--task-budget", type=float, default=None,
                               help="with --sandbox docker: seconds each task's validation in its own image may take "
                                    "(build, oracle and tests together; default: their own timeouts)")
    harbor_import.add_argument("--cpu-shares", type=int, default=None,
                               help="with --sandbox docker: docker --cpu-shares of the containers and image builds "
                                    "(default: $CLAWLOOP_DOCKER_CPU_SHARES, else Docker's)")
    evaluate = commands.add_parser("eval", help="a policy checkpoint on a directory of imported tasks: pass@1 with its "
                                                "95%% interval per task set, and a table of tasks")
    evaluate.add_argument("--tasks", type=Path, required=True,
                          help="a directory `clawloop harbor-import SRC --dest DIR` validated tasks into")
    evaluate.add_argument("--checkpoint", default=None,
                          help="a checkpoint directory, a round key (its trained policy) or a checkpoint id; "
                               "default: the policy's base model")
    evaluate.add_argument("--samples", type=int, default=None,
                          help="rollouts per task (default: the loop's evaluation_samples)")
    evaluate.add_argument("--sandbox", choices=["bubblewrap", "docker"], default=None,
                          help="the sandbox backend (default: $CLAWLOOP_SANDBOX's); on docker, tasks validated only "
                               "in their own image run there, on bubblewrap they are left out and named")
    harbor_run = commands.add_parser("harbor-run", help="run a Harbor task the Harbor way on the Docker engine: build "
                                                        "its Dockerfile, run solve.sh, then test.sh; prints the reward "
                                                        "of the oracle and of the untouched environment")
    harbor_run.add_argument("task", type=Path, help="a Harbor task directory (task.toml, environment/, tests/)")
    harbor_run.add_argument("--cpu-shares", type=int, default=None,
                            help="docker --cpu-shares of the build and the containers (default: "
                                 "$CLAWLOOP_DOCKER_CPU_SHARES, else Docker's)")
    harbor_prune = commands.add_parser("harbor-prune", help="remove the built task images (clawloop-harbor/*) that no "
                                                            "import destination's manifest lists as validated")
    harbor_prune.add_argument("--keep", type=Path, action="append", default=[],
                              help="an import destination whose tasks' images are kept (repeatable; default: "
                                   "$CLAWLOOP_HOME/evaluation/imported when it exists)")
    harbor_export = commands.add_parser("harbor-export", help="write a round's admitted tasks in the Harbor task format")
    harbor_export.add_argument("--round", required=True, help="round key, e.g. round-0001")
    harbor_export.add_argument("--out", type=Path, required=True, help="a directory that does not exist yet")
    args = parser.parse_args(argv)
    if args.command == "run" and args.rounds < 1:
        parser.error("--rounds must be at least 1")
    # Commands that store under $CLAWLOOP_HOME: one line naming the path and the cause, before anything runs.
    if args.command in ("setup", "run", "transfer") or (args.command == "harbor-import" and args.dest is None):
        check_home_writable(dagster=args.command in ("setup", "run"))
    if args.command == "harbor-import":
        from clawloop_assets.harbor.task_format import HarborTaskError, import_harbor_directory, render_import_table
        from resources.sandbox import BubblewrapSandbox, DockerSandbox

        if args.cpu_shares is not None and args.cpu_shares < 2:
            parser.error(f"--cpu-shares must be at least 2, got {args.cpu_shares}")
        cpu_shares = args.cpu_shares if args.cpu_shares is not None else environment.docker_cpu_shares
        sandbox = DockerSandbox(cpu_shares=cpu_shares) if args.sandbox == "docker" else BubblewrapSandbox()
        try:
            results, manifest = import_harbor_directory(args.src, args.dest or paths.evaluation_imports_dir(), sandbox,
                                                        oracle_timeout_s=args.oracle_timeout,
                                                        task_budget_s=args.task_budget)
        except HarborTaskError as exc:
            raise SystemExit(f"clawloop harbor-import: {exc}") from None
        print(render_import_table(results), end="")
        print(f"manifest: {manifest}")
    elif args.command == "eval":
        evaluate_task_dir(args.tasks, args.checkpoint, args.samples, args.sandbox)
    elif args.command == "harbor-run":
        from clawloop_assets.harbor.docker_run import validate_the_harbor_way
        from clawloop_assets.harbor.task_format import HarborTaskError

        try:
            failure, solved, untouched = validate_the_harbor_way(args.task, cpu_shares=args.cpu_shares)
        except HarborTaskError as exc:
            raise SystemExit(f"clawloop harbor-run: {exc}") from None
        print(f"image: {solved.image}")
        for note in solved.adaptations:
            print(f"adapted: {note}")
        for run in (solved, untouched):
            if run is not None:
                reward = "no reward" if run.reward is None else f"reward {run.reward:g}"
                print(f"{'oracle' if run.oracle else 'untouched'}: {reward} ({run.seconds:.1f} s): {run.detail}")
        if failure:
            raise SystemExit(f"clawloop harbor-run: {failure}")
    elif args.command == "harbor-prune":
        from clawloop_assets.harbor.docker_run import prune_task_images
        from clawloop_assets.harbor.task_format import HarborTaskError

        keep = args.keep or [d for d in [paths.evaluation_imports_dir()] if d.is_dir()]
        try:
            removed, kept = prune_task_images(keep)
        except HarborTaskError as exc:
            raise SystemExit(f"clawloop harbor-prune: {exc}") from None
        for tag in removed:
            print(f"removed {tag}")
        print(f"{len(removed)} task image(s) removed, {len(kept)} kept (validated in {', '.join(map(str, keep)) or 'none'})")
    elif args.command == "harbor-export":
        from clawloop_assets.harbor.task_format import export_round
        from resources.warehouse import DuckDBWarehouse

        for task_dir in export_round(DuckDBWarehouse(), args.round, args.out):
            print(task_dir)
    elif args.command == "export-pool":
        from clawloop_assets.training.transfer import export_pool
        from resources.warehouse import DuckDBWarehouse

        print(f"pool: {export_pool(DuckDBWarehouse(), args.round, args.out)}")
    elif args.command == "lineage":
        from clawloop_assets.reporting.lineage import LineageError, lineage, render_text
        from resources.warehouse import DuckDBWarehouse

        try:
            print(render_text(lineage(DuckDBWarehouse(), args.id)), end="")
        except LineageError as exc:
            raise SystemExit(f"clawloop lineage: {exc}") from None
    elif args.command == "transfer":
        transfer_to_base(args.pool, args.base_checkpoint, args.out, args.samples)
    elif args.command == "setup":
        setup()
    elif args.command == "run":
        run_config = load_run_config(args.config) if args.config else None
        run_rounds_with(args.rounds, args.policy, args.sandbox, run_config, args.config)


if __name__ == "__main__":
    main(sys.argv[1:])
