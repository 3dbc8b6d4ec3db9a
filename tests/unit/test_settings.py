"""``nodeplan run`` settings: every option as ``NODEPLAN_<OPTION>``, Karpenter's environment variable names
(``pkg/operator/options``: BATCH_MAX_DURATION, BATCH_IDLE_DURATION, LOG_LEVEL, METRICS_PORT, HEALTH_PROBE_PORT,
FEATURE_GATES, PREFERENCE_POLICY, LEADER_ELECTION_NAME/NAMESPACE), precedence flag > NODEPLAN_ > Karpenter's
name > default, Go durations, one-line errors with exit 2, ``--version`` and ``nodeplan_build_info``.

The controller itself is replaced by a recorder: what is asserted is the ``ControllerOptions`` the command
would start it with, and what the command prints."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

import cli.run
from cli.app import app
from cli.settings import KARPENTER_NAMES, TOOLING, Duration, FeatureGates
from controller.metrics import Metrics
from controller.run import ControllerOptions
from solver.rules.preferences import PreferencePolicy

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Started:
    options: list[ControllerOptions] = field(default_factory=list)
    log_levels: list[str] = field(default_factory=list)
    #: the keyword arguments of each API client made (its rate limit)
    clients: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> Started:
    """``nodeplan run`` up to the point where the controller would start; no environment leaks in."""
    for name in list(os.environ):
        if (name.startswith("NODEPLAN_") and name not in TOOLING) or name in KARPENTER_NAMES.values():
            monkeypatch.delenv(name)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    record = Started()

    class Recorder:
        lost_leadership = crashed = False

        def __init__(self, api: Any, options: ControllerOptions, instance_types: Any) -> None:
            record.options.append(options)

        def run(self, stop: Any) -> None:
            return None

    monkeypatch.setattr(cli.run, "api_client", lambda kubeconfig=None, **kw: record.clients.append(kw) or object())
    monkeypatch.setattr(cli.run, "preflight", lambda api, namespace, elect: None)
    monkeypatch.setattr(cli.run, "configure_logging", lambda level, **_: record.log_levels.append(level))
    monkeypatch.setattr(cli.run, "Controller", Recorder)
    monkeypatch.setattr(signal, "signal", lambda signum, handler: None)
    return record


def run(env: dict[str, str], *args: str) -> Any:
    return CliRunner().invoke(app, ["run", "--kubeconfig", "/dev/null", *args], env=env)


def options(started: Started, env: dict[str, str], *args: str) -> ControllerOptions:
    result = run(env, *args)
    assert result.exit_code == 0, result.output
    return started.options[-1]


def test_defaults_match_karpenter(started: Started) -> None:
    o = options(started, {})
    # Karpenter's defaults (pkg/operator/options): 10 s max batch, 1 s idle, metrics 8080, health 8081, Respect,
    # SpotToSpotConsolidation off
    assert (o.batch_max, o.batch_idle, o.metrics_port, o.health_port) == (10.0, 1.0, 8080, 8081)
    assert o.provisioner.preference_policy is PreferencePolicy.RESPECT
    assert o.disruption.spot_to_spot is False
    assert (o.provisioner.workers, o.disruption.workers) == (2, 2)
    assert started.log_levels == ["info"]


@pytest.mark.parametrize(("env", "check"), [
    ({"NODEPLAN_BATCH_MAX": "1m30s"}, lambda o: o.batch_max == 90.0),
    ({"NODEPLAN_BATCH_IDLE": "500ms"}, lambda o: o.batch_idle == 0.5),
    ({"NODEPLAN_SOLVE_TIME_LIMIT": "2.5s"}, lambda o: o.provisioner.solve_time_limit == 2.5),
    ({"NODEPLAN_BIND_GRACE": "1m"}, lambda o: o.provisioner.bind_grace == 60.0),
    ({"NODEPLAN_CONSOLIDATION_INTERVAL": "30s"}, lambda o: o.disruption.interval == 30.0),
    ({"NODEPLAN_CONSOLIDATION_TIME_LIMIT": "1m"}, lambda o: o.disruption.time_limit == 60.0),
    ({"NODEPLAN_CONSOLIDATION_VALIDATION_WAIT": "0s"}, lambda o: o.disruption.validation_wait == 0.0),
    ({"NODEPLAN_CONSOLIDATION": "false"}, lambda o: o.disruption.enabled is False),
    ({"NODEPLAN_METRICS_PORT": "9090"}, lambda o: o.metrics_port == 9090),
    ({"NODEPLAN_HEALTH_PORT": "9091"}, lambda o: o.health_port == 9091),
    ({"NODEPLAN_BIND_ADDRESS": "127.0.0.1"}, lambda o: o.bind_address == "127.0.0.1"),
    ({"NODEPLAN_LEADER_ELECT": "true"}, lambda o: o.leader_elect is True),
    ({"NODEPLAN_LEADER_ELECTION_NAMESPACE": "ops"}, lambda o: o.lease_namespace == "ops"),
    ({"NODEPLAN_LEADER_ELECTION_NAME": "np"}, lambda o: o.lease_name == "np"),
    ({"NODEPLAN_SOLVER_WORKERS": "4"}, lambda o: o.provisioner.workers == o.disruption.workers == 4),
    ({"NODEPLAN_PREFERENCE_POLICY": "Price", "NODEPLAN_PREFERENCE_PRICE": "0.01"},
     lambda o: (o.provisioner.preference_policy, o.provisioner.preference_price) == (PreferencePolicy.PRICE, 0.01)),
    ({"NODEPLAN_SPOT_TO_SPOT": "true"}, lambda o: o.disruption.spot_to_spot is True),
    ({"NODEPLAN_FEATURE_GATES": "SpotToSpotConsolidation=true"}, lambda o: o.disruption.spot_to_spot is True),
])
def test_nodeplan_environment_variables(started: Started, env: dict[str, str], check: Any) -> None:
    assert check(options(started, env))


def test_log_level_from_the_environment(started: Started) -> None:
    options(started, {"NODEPLAN_LOG_LEVEL": "warning"})
    options(started, {"LOG_LEVEL": "DEBUG"})
    assert started.log_levels == ["warning", "debug"]


def test_every_run_option_is_a_nodeplan_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Also options added later: NODEPLAN_<OPTION> is read for each of them (click's auto-envvar prefix)."""
    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    ctx = command.make_context("run", ["--help"], resilient_parsing=True)
    names = [p.name for p in command.params if p.name and p.name != "help"]
    assert {"batch_max", "batch_idle", "preference_policy", "spot_to_spot", "solver_workers"} <= set(names)
    for name in names:
        variable = f"NODEPLAN_{name.upper()}"
        monkeypatch.setenv(variable, "sentinel")
        param = next(p for p in command.params if p.name == name)
        assert param.resolve_envvar_value(ctx) == "sentinel", variable
        monkeypatch.delenv(variable)


@pytest.mark.parametrize(("env", "check"), [
    ({"BATCH_MAX_DURATION": "1m"}, lambda o: o.batch_max == 60.0),
    ({"BATCH_IDLE_DURATION": "250ms"}, lambda o: o.batch_idle == 0.25),
    ({"METRICS_PORT": "8000"}, lambda o: o.metrics_port == 8000),
    ({"HEALTH_PROBE_PORT": "8001"}, lambda o: o.health_port == 8001),
    ({"PREFERENCE_POLICY": "Ignore"}, lambda o: o.provisioner.preference_policy is PreferencePolicy.IGNORE),
    ({"LEADER_ELECTION_NAME": "karpenter-leader-election"}, lambda o: o.lease_name == "karpenter-leader-election"),
    ({"LEADER_ELECTION_NAMESPACE": "kube-system"}, lambda o: o.lease_namespace == "kube-system"),
    # the value Karpenter's chart renders by default: SpotToSpotConsolidation off, the others nodeplan ignores
    ({"FEATURE_GATES": "StaticCapacity=false,SpotToSpotConsolidation=false,NodeRepair=false,CapacityBuffer=false"},
     lambda o: o.disruption.spot_to_spot is False),
    ({"FEATURE_GATES": "SpotToSpotConsolidation=true,NodeRepair=false"}, lambda o: o.disruption.spot_to_spot),
])
def test_karpenter_names(started: Started, env: dict[str, str], check: Any) -> None:
    assert check(options(started, env))


def test_flag_beats_nodeplan_variable_beats_karpenter_name(started: Started) -> None:
    both = {"NODEPLAN_BATCH_MAX": "30s", "BATCH_MAX_DURATION": "40s"}
    assert options(started, both, "--batch-max", "20s").batch_max == 20.0
    assert options(started, both).batch_max == 30.0
    assert options(started, {"BATCH_MAX_DURATION": "40s"}).batch_max == 40.0
    assert options(started, {"METRICS_PORT": "9000"}, "--metrics-port", "9100").metrics_port == 9100
    # --spot-to-spot (or NODEPLAN_SPOT_TO_SPOT) decides over the feature gate, in both directions
    gate = {"FEATURE_GATES": "SpotToSpotConsolidation=true"}
    assert options(started, gate, "--no-spot-to-spot").disruption.spot_to_spot is False
    assert options(started, {**gate, "NODEPLAN_SPOT_TO_SPOT": "false"}).disruption.spot_to_spot is False
    assert options(started, {"FEATURE_GATES": "SpotToSpotConsolidation=false"},
                   "--spot-to-spot").disruption.spot_to_spot is True


@pytest.mark.parametrize(("env", "args", "expected"), [
    ({"BATCH_MAX_DURATION": "ten seconds"}, (),
     "error: BATCH_MAX_DURATION='ten seconds': invalid duration 'ten seconds' (expected e.g. 10s, 1m30s or 500ms)"),
    ({"NODEPLAN_BATCH_IDLE": "1x"}, (),
     "error: NODEPLAN_BATCH_IDLE='1x': invalid duration '1x' (expected e.g. 10s, 1m30s or 500ms)"),
    ({}, ("--solve-time-limit", "5 s"),
     "error: --solve-time-limit: invalid duration '5 s' (expected e.g. 10s, 1m30s or 500ms)"),
    ({"NODEPLAN_BATCH_IDLE": "10ms"}, (), "error: NODEPLAN_BATCH_IDLE='10ms': '10ms' is shorter than the minimum "
                                          "0.05s"),
    ({"NODEPLAN_CONSOLIDATION_INTERVAL": "Never"}, (),
     "error: NODEPLAN_CONSOLIDATION_INTERVAL='Never': 'Never' is not allowed here (expected e.g. 10s)"),
])
def test_bad_duration_is_one_line_and_exit_2(started: Started, env: dict[str, str], args: tuple[str, ...],
                                             expected: str) -> None:
    result = run(env, *args)
    assert result.exit_code == 2
    assert result.stderr.strip() == expected
    assert not started.options


@pytest.mark.parametrize(("env", "needle"), [
    ({"METRICS_PORT": "http"}, "METRICS_PORT='http': "),
    ({"NODEPLAN_SOLVER_WORKERS": "0"}, "NODEPLAN_SOLVER_WORKERS='0': "),
    ({"PREFERENCE_POLICY": "Sometimes"}, "PREFERENCE_POLICY='Sometimes': "),
    ({"LOG_LEVEL": "verbose"}, "LOG_LEVEL='verbose': "),
    ({"NODEPLAN_SPOT_TO_SPOT": "maybe"}, "NODEPLAN_SPOT_TO_SPOT='maybe': "),
    ({"FEATURE_GATES": "SpotToSpot=true"}, "FEATURE_GATES='SpotToSpot=true': unknown feature gate 'SpotToSpot=true'"),
    ({"FEATURE_GATES": "SpotToSpotConsolidation=yes"},
     "feature gate SpotToSpotConsolidation: 'yes' is not true or false"),
    ({"NODEPLAN_BATCH_MAXIMUM": "10s"}, "error: unknown setting in the environment: NODEPLAN_BATCH_MAXIMUM "
                                        "(did you mean NODEPLAN_BATCH_MAX?)"),
])
def test_bad_setting_names_the_variable(started: Started, env: dict[str, str], needle: str) -> None:
    result = run(env)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize(("env", "args", "limit"), [
    ({}, (), {"qps": 200.0, "burst": 300}),  # Karpenter's defaults
    ({"KUBE_CLIENT_QPS": "50", "KUBE_CLIENT_BURST": "100"}, (), {"qps": 50.0, "burst": 100}),
    ({"NODEPLAN_KUBE_CLIENT_QPS": "12.5", "KUBE_CLIENT_QPS": "50"}, (), {"qps": 12.5, "burst": 300}),
    ({"KUBE_CLIENT_BURST": "1e+06"}, (), {"qps": 200.0, "burst": 1000000}),  # how Helm renders a large whole value
    ({"NODEPLAN_KUBE_CLIENT_BURST": "10"}, ("--kube-client-qps", "5", "--kube-client-burst", "20"),
     {"qps": 5.0, "burst": 20}),
])
def test_kube_client_qps_and_burst_reach_the_api_client(started: Started, env: dict[str, str],
                                                        args: tuple[str, ...], limit: dict[str, Any]) -> None:
    options(started, env, *args)
    assert started.clients == [limit]


@pytest.mark.parametrize(("env", "args", "expected"), [
    ({"KUBE_CLIENT_QPS": "0"}, (), "error: KUBE_CLIENT_QPS='0': '0' must be a number above 0"),
    ({"KUBE_CLIENT_QPS": "-5"}, (), "error: KUBE_CLIENT_QPS='-5': '-5' must be a number above 0"),
    ({"NODEPLAN_KUBE_CLIENT_QPS": "fast"}, (), "error: NODEPLAN_KUBE_CLIENT_QPS='fast': 'fast' is not a number"),
    ({"KUBE_CLIENT_QPS": "nan"}, (), "error: KUBE_CLIENT_QPS='nan': 'nan' must be a number above 0"),
    ({"KUBE_CLIENT_BURST": "0"}, (), "error: KUBE_CLIENT_BURST='0': '0' must be a number above 0"),
    ({"KUBE_CLIENT_BURST": "12.5"}, (), "error: KUBE_CLIENT_BURST='12.5': '12.5' is not a whole number"),
    ({}, ("--kube-client-burst", "lots"), "error: --kube-client-burst: 'lots' is not a number"),
])
def test_bad_kube_client_limit_is_one_line_and_exit_2(started: Started, env: dict[str, str], args: tuple[str, ...],
                                                      expected: str) -> None:
    result = run(env, *args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip() == expected
    assert not started.options and not started.clients


def test_tooling_variables_are_not_settings(started: Started) -> None:
    assert options(started, {"NODEPLAN_CACHE": "/tmp/cache", "NODEPLAN_CLUSTER_DIR": "/tmp/c"}).batch_max == 10.0


def test_unimplemented_feature_gate_is_a_warning(started: Started) -> None:
    result = run({"FEATURE_GATES": "NodeRepair=true"})
    assert result.exit_code == 0
    assert result.stderr.strip() == "warning: feature gate NodeRepair has no effect in nodeplan"


@pytest.mark.parametrize(("text", "seconds"), [
    ("10s", 10.0), ("1m30s", 90.0), ("500ms", 0.5), ("1h", 3600.0), ("1.5m", 90.0), ("0", 0.0), ("2", 2.0),
    (3.0, 3.0),
])
def test_go_durations(text: str | float, seconds: float) -> None:
    assert Duration()(text) == seconds


def test_feature_gates_parse_like_kubernetes() -> None:
    gates = FeatureGates.parse(" SpotToSpotConsolidation=True , NodeRepair=0,")
    assert gates.enabled("SpotToSpotConsolidation") and not gates.enabled("NodeRepair")
    assert gates.enabled("ReservedCapacity")  # Karpenter's default when unset
    assert FeatureGates.parse("").gates == {}


def _expected_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


def test_version_and_build_info() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    version = metadata.version("nodeplan")
    commit = _expected_commit()
    assert result.stdout == f"nodeplan {version} (commit {commit})\n"
    metrics = Metrics()
    assert metrics.value("nodeplan_build_info", {"version": version, "commit": commit}) == 1.0
    assert f'nodeplan_build_info{{commit="{commit}",version="{version}"}} 1.0' in metrics.exposition().decode()
