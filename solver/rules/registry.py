"""The rule families, in the order they compile and explain (``rules.base``). Adding a family is one
solver module implementing ``Rule``, one check module under ``solver/verify/`` and one line here.

Order matters twice: ``constrain`` runs top-down (pins towards running pods before domain pins, which
read them), and ``explain`` takes the first answer, so families a person would fix first come first.
Counter families keep their axis order (anti-affinity, host ports, spread)."""

from __future__ import annotations

from solver.rules.antiaffinity import HostnameAffinity, HostnameAntiAffinity
from solver.rules.base import Rule
from solver.rules.counters import HostnameSpread
from solver.rules.daemonsets import DaemonSetOverhead
from solver.rules.dra import ResourceClaims
from solver.rules.hostpreferences import HostPreferences
from solver.rules.limits import NodePoolLimits
from solver.rules.minvalues import MinValues
from solver.rules.podaffinity import RunningPodTerms
from solver.rules.ports import HostPorts
from solver.rules.preferences import Preferences
from solver.rules.resources import ResourceFit
from solver.rules.selection import NodeSelection
from solver.rules.topology import DomainRules
from solver.rules.volumes import VolumeTopology

RULES: tuple[Rule, ...] = (
    VolumeTopology(),
    RunningPodTerms(),
    DomainRules(),
    NodeSelection(),
    MinValues(),
    HostnameAffinity(),
    HostnameAntiAffinity(),
    HostPorts(),
    HostnameSpread(),
    HostPreferences(),
    DaemonSetOverhead(),
    ResourceFit(),
    NodePoolLimits(),
    Preferences(),
    ResourceClaims(),
)
