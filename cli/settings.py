"""``nodeplan run`` settings from the environment, as Karpenter's chart configures Karpenter.

Every option of ``nodeplan run`` is also the environment variable ``NODEPLAN_<OPTION>`` (``--batch-max`` →
``NODEPLAN_BATCH_MAX``: click's auto-envvar prefix, so an option added later gets its variable without a
change here). Where Karpenter's operator (``pkg/operator/options``) has a setting with the same meaning, its
name is accepted too (``KARPENTER_NAMES``), after the ``NODEPLAN_`` one. Precedence: flag, then
``NODEPLAN_<OPTION>``, then Karpenter's name, then the default.

Durations are Go durations (``10s``, ``1m30s``, ``500ms``; a bare number is seconds, as these flags always
took). A malformed value, a ``NODEPLAN_`` variable that is no setting, or an unknown feature gate is one line
naming the flag or the variable, exit 2 — a controller that silently ignores its configuration is worse than
one that does not start.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import typer
from typer.core import TyperCommand

from model.durations import parse_duration

PREFIX = "NODEPLAN"

#: option → Karpenter's environment variable of the same meaning (Karpenter's defaults equal nodeplan's:
#: 10 s / 1 s batches, ports 8080 / 8081, Respect, info, 200 QPS / 300 burst for the API client's token bucket,
#: ``controller.throttle``). Not mapped, because nodeplan has no equivalent: DISABLE_LEADER_ELECTION and
#: IGNORE_DRA_REQUESTS (inverted meaning and a different default: a Karpenter chart's IGNORE_DRA_REQUESTS=true
#: would switch nodeplan's DRA off; ``--no-dra`` says it), MEMORY_LIMIT, CPU_REQUESTS, MIN_VALUES_POLICY,
#: SCHEDULER_CONFIG, LOG_OUTPUT_PATHS.
KARPENTER_NAMES: Mapping[str, str] = {
    "batch_max": "BATCH_MAX_DURATION",
    "batch_idle": "BATCH_IDLE_DURATION",
    "log_level": "LOG_LEVEL",
    "metrics_port": "METRICS_PORT",
    "health_port": "HEALTH_PROBE_PORT",
    "feature_gates": "FEATURE_GATES",
    "preference_policy": "PREFERENCE_POLICY",
    "leader_election_name": "LEADER_ELECTION_NAME",
    "leader_election_namespace": "LEADER_ELECTION_NAMESPACE",
    "cluster_name": "CLUSTER_NAME",
    "cluster_endpoint": "CLUSTER_ENDPOINT",
    "interruption_queue": "INTERRUPTION_QUEUE",
    "kube_client_qps": "KUBE_CLIENT_QPS",
    "kube_client_burst": "KUBE_CLIENT_BURST",
}

#: ``NODEPLAN_`` variables the repository's tooling reads (hack/, tests): not settings, not unknown either
TOOLING = frozenset({"NODEPLAN_CACHE", "NODEPLAN_BUILD_JOBS", "NODEPLAN_CLUSTER_DIR", "NODEPLAN_CLUSTER_TIMEOUT",
                     "NODEPLAN_CLUSTER_SCHEDULER_ARGS",
                     "NODEPLAN_CONTROL_PLANE_BIN", "NODEPLAN_SHRINK", "NODEPLAN_APISERVER_URL",
                     "NODEPLAN_APISERVER_TOKEN", "NODEPLAN_APISERVER_CA"})


def envvars(option: str) -> list[str]:
    """The environment variables of one option, in precedence order (for ``typer.Option(envvar=...)``)."""
    names = [f"{PREFIX}_{option.upper()}"]
    if option in KARPENTER_NAMES:
        names.append(KARPENTER_NAMES[option])
    return names


class Duration:
    """A ``typer.Option`` parser: a Go duration (or bare seconds) of at least ``minimum`` seconds, as float."""

    def __init__(self, minimum: float = 0.0) -> None:
        self.minimum = minimum

    def __call__(self, value: str | float) -> float:
        if isinstance(value, int | float):  # the declared default
            return float(value)
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            try:
                parsed = parse_duration(text)
            except ValueError:
                raise typer.BadParameter(f"invalid duration {value!r} (expected e.g. 10s, 1m30s or 500ms)"
                                         ) from None
            if parsed is None:
                raise typer.BadParameter(f"{value!r} is not allowed here (expected e.g. 10s)") from None
            seconds = parsed
        if seconds < self.minimum:
            raise typer.BadParameter(f"{value!r} is shorter than the minimum {self.minimum:g}s")
        return seconds


class Positive:
    """A ``typer.Option`` parser: a number above zero (``integer``: a whole one), as client-go's QPS and Burst
    (zero or less would mean client-go's defaults or no limit there; here it is a mistake to report)."""

    def __init__(self, integer: bool = False) -> None:
        self.integer = integer

    def __call__(self, value: str | float) -> float:
        if isinstance(value, int | float):  # the declared default
            return value
        try:
            number = float(value.strip())  # also what Helm renders a large whole value as: 1e+06
        except ValueError:
            raise typer.BadParameter(f"{value!r} is not a number") from None
        if not 0 < number < float("inf"):
            raise typer.BadParameter(f"{value!r} must be a number above 0")
        if self.integer:
            if not number.is_integer():
                raise typer.BadParameter(f"{value!r} is not a whole number")
            return int(number)
        return number


class LogLevel(StrEnum):
    """Karpenter's levels (debug, info, error) plus warning."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


#: Karpenter's feature gates (``pkg/operator/options.FeatureGates``) and their defaults there
KARPENTER_GATES: Mapping[str, bool] = {"NodeRepair": False, "ReservedCapacity": True,
                                       "SpotToSpotConsolidation": False, "NodeOverlay": False,
                                       "StaticCapacity": False, "CapacityBuffer": False}
#: Kubernetes' gates nodeplan honours, with their defaults in Kubernetes 1.36 (DRA: GA, on)
KUBERNETES_GATES: Mapping[str, bool] = {"DynamicResourceAllocation": True}
KNOWN_GATES: Mapping[str, bool] = {**KARPENTER_GATES, **KUBERNETES_GATES}
#: the gates nodeplan implements; the others are accepted (a Karpenter chart sets them) and have no effect
IMPLEMENTED_GATES = frozenset({"SpotToSpotConsolidation", "DynamicResourceAllocation"})
_TRUE, _FALSE = {"1", "t", "T", "TRUE", "true", "True"}, {"0", "f", "F", "FALSE", "false", "False"}


@dataclass(frozen=True)
class FeatureGates:
    """``Name=true,Other=false`` as Kubernetes' ``--feature-gates`` (values as Go's ``strconv.ParseBool``)."""

    gates: Mapping[str, bool]

    @classmethod
    def parse(cls, text: str | FeatureGates) -> FeatureGates:
        """The ``typer.Option`` parser; unknown names and values are a ``BadParameter``."""
        if isinstance(text, FeatureGates):
            return text
        gates: dict[str, bool] = {}
        for item in (part.strip() for part in text.split(",")):
            if not item:
                continue
            name, sep, raw = (s.strip() for s in item.partition("="))
            if not sep or name not in KNOWN_GATES:
                known = ", ".join(KNOWN_GATES)
                raise typer.BadParameter(f"unknown feature gate {item!r} (known: {known}; form Name=true)")
            if raw not in _TRUE | _FALSE:
                raise typer.BadParameter(f"feature gate {name}: {raw!r} is not true or false")
            gates[name] = raw in _TRUE
        return cls(gates)

    def enabled(self, name: str) -> bool:
        return self.gates.get(name, KNOWN_GATES[name])

    def ignored(self) -> list[str]:
        """Gates set away from Karpenter's default that nodeplan does not implement (worth a warning)."""
        return [n for n, on in self.gates.items() if n not in IMPLEMENTED_GATES and on != KNOWN_GATES[n]]

    def __str__(self) -> str:
        return ",".join(f"{n}={str(v).lower()}" for n, v in self.gates.items())


#: no gate given: Karpenter's defaults
NO_GATES = FeatureGates({})


def _source(ctx: typer.Context, param: Any) -> str:
    """How a bad value is named: the environment variable it came from, else the flag."""
    from typer._click.core import ParameterSource  # typer vendors click; the source enum is not re-exported

    if param is None:
        return "nodeplan run"
    if ctx.get_parameter_source(param.name) is ParameterSource.ENVIRONMENT:
        explicit = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar or [])
        auto = [f"{ctx.auto_envvar_prefix}_{param.name.upper()}"] if ctx.auto_envvar_prefix else []
        for name in [*explicit, *auto]:
            if os.environ.get(name):
                return f"{name}={os.environ[name]!r}"
    return "/".join(param.opts) if param.opts else str(param.name)


def unknown_settings(ctx: typer.Context, environ: Mapping[str, str], params: Sequence[Any]) -> list[str]:
    """``NODEPLAN_`` variables that are neither a setting of this command nor tooling, each with a hint."""
    known = {f"{ctx.auto_envvar_prefix}_{p.name.upper()}" for p in params if p.name} if ctx.auto_envvar_prefix \
        else set()
    for p in params:
        known.update([p.envvar] if isinstance(p.envvar, str) else list(p.envvar or []))
    out = []
    for name in sorted(environ):
        if name.startswith(f"{PREFIX}_") and name not in known and name not in TOOLING:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            out.append(f"{name}" + (f" (did you mean {close[0]}?)" if close else ""))
    return out


class SettingsCommand(TyperCommand):
    """A typer command whose options are also ``NODEPLAN_<OPTION>`` variables and whose bad values are one line.

    Typer's own error display is a multi-line panel naming every variable of the option; a controller's log
    (and ``kubectl logs``) wants the one that is wrong.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        unknown = unknown_settings(ctx, os.environ, self.params)
        if unknown and not ctx.resilient_parsing:
            typer.echo(f"error: unknown setting in the environment: {', '.join(unknown)} "
                       f"(see nodeplan {ctx.info_name} --help)", err=True)
            raise typer.Exit(2)
        try:
            return super().parse_args(ctx, args)
        except typer.BadParameter as err:
            message = err.message.removeprefix("Value error, ")  # pydantic's prefix for a parser's ValueError
            typer.echo(f"error: {_source(ctx, err.param)}: {message}", err=True)
            raise typer.Exit(2) from None


#: ``app.command("run", **COMMAND)``: the class and the ``NODEPLAN`` prefix for every option's variable
COMMAND: dict[str, Any] = {"cls": SettingsCommand, "context_settings": {"auto_envvar_prefix": PREFIX}}
