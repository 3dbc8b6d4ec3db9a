"""Dynamic Resource Allocation (``resource.k8s.io/v1``): device classes, claims, templates and slices.

The four kinds are parsed with the API server's own limits and rules (``k8s.io/api/resource/v1`` types,
``pkg/apis/resource/validation``, the v1 defaults), so an object the API server would reject is one
``InputError`` naming its field, and nothing it accepts is rejected. What CEL selectors mean is not
decided here (``model.dracel`` evaluates them): an expression is kept as written, and one that does not
compile makes its pod unschedulable rather than the input bad, as the kube-scheduler leaves it.

Device attributes stay in the API's ``DeviceAttribute`` shape (``{"string": "a100"}``, ``{"int": 0}``,
``{"bool": true}``, ``{"version": "1.4.2"}``) and capacities in ``DeviceCapacity`` shape (``{"value":
"80Gi", "requestPolicy": ...}``): that is what the CEL evaluator reads. Also here, as pure functions over
the parsed objects: pool gathering as the structured allocator does it, the allocated-device state, the
device inventory an instance type publishes, and the resolution of a pod's claims.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from model.errors import InputError
from model.fields import RawObject
from model.pod import Pod, PodClaimRef, selector_term
from model.quantity import parse_quantity
from model.requirements import Requirements, label_key_problem

API_VERSION = "resource.k8s.io/v1"
KINDS = ("DeviceClass", "ResourceClaim", "ResourceClaimTemplate", "ResourceSlice")

# Limits of resource.k8s.io/v1 (k8s.io/api/resource/v1/types.go).
MAX_REQUESTS = 32                      # DeviceRequestsMaxSize
MAX_CONSTRAINTS = 32                   # DeviceConstraintsMaxSize
MAX_CONFIGS = 32                       # DeviceConfigMaxSize
MAX_SELECTORS = 32                     # DeviceSelectorsMaxSize
MAX_SUBREQUESTS = 8                    # FirstAvailableDeviceRequestMaxSize
MAX_TOLERATIONS = 16                   # DeviceTolerationsMaxLength
MAX_EXPRESSION = 10 * 1024             # CELSelectorExpressionMaxLength
MAX_RESULTS = 32                       # AllocationResultsMaxSize
MAX_RESERVED_FOR = 256                 # ResourceClaimReservedForMaxSize
MAX_DEVICES = 128                      # ResourceSliceMaxDevices
MAX_DEVICES_ADVANCED = 64              # ... when a device has taints or consumes counters
MAX_COUNTER_SETS = 8                   # ResourceSliceMaxCounterSets
MAX_COUNTERS = 32                      # per counter set, and per device counter consumption
MAX_CONSUMPTIONS = 2                   # ResourceSliceMaxDeviceCounterConsumptionsPerDevice
MAX_ATTRIBUTES_AND_CAPACITIES = 32     # ResourceSliceMaxAttributesAndCapacitiesPerDevice
MAX_ATTRIBUTE_VALUE = 64               # DeviceAttributeMaxValueLength
MAX_DEVICE_TAINTS = 16                 # DeviceTaintsMaxLength
MAX_VALID_VALUES = 10                  # CapacityRequestPolicyDiscreteMaxOptions
MAX_BINDING_CONDITIONS = 4

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_C_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMERIC = r"(0|[1-9]\d*)"
_PRERELEASE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_SEMVER = re.compile(rf"^{_NUMERIC}\.{_NUMERIC}\.{_NUMERIC}(-{_PRERELEASE}(\.{_PRERELEASE})*)?"
                     r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

ATTRIBUTE_TYPES = ("int", "bool", "string", "version")
#: list-typed attributes (``ints``, ``strings``...) belong to the alpha DRAListTypeAttributes gate, off in 1.36
LIST_ATTRIBUTE_TYPES = ("ints", "bools", "strings", "versions")
TAINT_EFFECTS = ("NoSchedule", "NoExecute", "None")
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"


# --- names -------------------------------------------------------------------------------------------------

def _fail(message: str, field: str) -> InputError:
    return InputError(message, field=field)


def dns_label(value: str, field: str, what: str = "name") -> str:
    if not value:
        raise _fail(f"{what} is required", field)
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise _fail(f"{what} {value!r} must be a DNS label (at most 63 lower-case alphanumerics or '-', "
                    "starting and ending with an alphanumeric)", field)
    return value


def dns_subdomain(value: str, field: str, what: str = "name") -> str:
    if not value:
        raise _fail(f"{what} is required", field)
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise _fail(f"{what} {value!r} must be a DNS subdomain (at most 253 lower-case alphanumerics, '-' "
                    "or '.')", field)
    return value


def driver_name(value: str, field: str) -> str:
    """A driver name as a CSI driver name: at most 63 characters, a DNS subdomain ignoring case."""
    if not value:
        raise _fail("driver is required", field)
    if len(value) > 63 or not _DNS_SUBDOMAIN.match(value.lower()):
        raise _fail(f"driver {value!r} must be a DNS subdomain of at most 63 characters", field)
    return value


def pool_name(value: str, field: str) -> str:
    """One or more DNS subdomains separated by ``/``, at most 253 characters."""
    if not value:
        raise _fail("pool name is required", field)
    if len(value) > 253 or not all(_DNS_SUBDOMAIN.match(part) for part in value.split("/")):
        raise _fail(f"pool name {value!r} must be DNS subdomains separated by '/', at most 253 characters", field)
    return value


def qualified_name(value: str, field: str) -> str:
    """An attribute or capacity name: a C identifier of at most 32 characters, optionally ``domain/``."""
    domain, slash, ident = value.rpartition("/")
    if slash and (not domain or len(domain) > 63 or not _DNS_SUBDOMAIN.match(domain.lower())):
        raise _fail(f"name {value!r}: the domain must be a DNS subdomain of at most 63 characters", field)
    if not ident or len(ident) > 32 or not _C_IDENTIFIER.match(ident):
        raise _fail(f"name {value!r} must be a C identifier of at most 32 characters, optionally prefixed "
                    "by a domain and '/'", field)
    return value


def fully_qualified_name(value: str, field: str) -> str:
    qualified_name(value, field)
    if "/" not in value:
        raise _fail(f"{value!r} must be a domain and a name separated by '/'", field)
    return value


def _quantity(raw: Any, field: str) -> str:
    """A quantity as written (kept for the API shape), checked to parse."""
    if raw is None or isinstance(raw, (dict, list, bool)):
        raise _fail(f"expected a quantity, got {raw!r}", field)
    text = str(raw)
    try:
        parse_quantity(text)
    except InputError as err:
        raise _fail(err.message, field) from None
    return text


def _check_size(items: Sequence[Any], limit: int, field: str, what: str) -> None:
    if len(items) > limit:
        raise _fail(f"at most {limit} {what} are allowed, got {len(items)}", field)


def _unique(names: Iterable[tuple[str, str]], what: str) -> None:
    """``(name, field)`` pairs: the first repeated name is an error at its field."""
    seen: set[str] = set()
    for name, field in names:
        if name in seen:
            raise _fail(f"duplicate {what} {name!r}", field)
        seen.add(name)


def _node_selector(obj: RawObject, key: str, *, one_term: bool = False) -> dict[str, Any] | None:
    """A ``NodeSelector`` kept in API shape, checked as the API server checks it."""
    if obj.data.get(key) is None:
        return None
    selector = obj.obj(key)
    terms = selector.parse_each("nodeSelectorTerms", selector_term)
    if not terms:
        raise _fail("must have at least one node selector term", f"{selector.path}.nodeSelectorTerms")
    if one_term and len(terms) != 1:
        raise _fail("must have exactly one node selector term", f"{selector.path}.nodeSelectorTerms")
    return dict(selector.data)


def node_terms(selector: Mapping[str, Any] | None) -> tuple[Requirements, ...]:
    """A NodeSelector's terms (ORed) as label requirements; ``matchFields metadata.name`` becomes the
    hostname label, as for pods (``model.pod.selector_term``)."""
    if selector is None:
        return ()
    return tuple(RawObject(selector).parse_each("nodeSelectorTerms", selector_term))


def _true_or_unset(obj: RawObject, key: str) -> bool:
    value = obj.data.get(key)
    if value is None:
        return False
    if value is not True:
        raise _fail("must be either unset or set to true", f"{obj.path}.{key}" if obj.path else key)
    return True


def _conditions(obj: RawObject, key: str) -> tuple[str, ...]:
    items = obj.data.get(key) or []
    field = f"{obj.path}.{key}" if obj.path else key
    if not isinstance(items, list):
        raise _fail("expected a list of condition types", field)
    _check_size(items, MAX_BINDING_CONDITIONS, field, key)
    return tuple(str(i) for i in items)


# --- tolerations and taints --------------------------------------------------------------------------------

class DeviceTaint(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    value: str = ""
    effect: Literal["NoSchedule", "NoExecute", "None"]

    @classmethod
    def parse(cls, raw: Any) -> DeviceTaint:
        obj = RawObject(raw)
        key = obj.str("key")
        problem = label_key_problem(key) if key else "taint key is required"
        if problem:
            raise _fail(problem, "key")
        effect = obj.str("effect")
        if effect not in TAINT_EFFECTS:
            raise _fail(f"unknown taint effect {effect!r} (NoSchedule, NoExecute or None)", "effect")
        return cls(key=key, value=obj.str("value"), effect=effect)

    def api(self) -> dict[str, Any]:
        return {"key": self.key, **({"value": self.value} if self.value else {}), "effect": self.effect}


class DeviceToleration(BaseModel):
    """A request's toleration of device taints (the node toleration rules; ``None`` effects never block)."""

    model_config = ConfigDict(frozen=True)

    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    @classmethod
    def parse(cls, raw: Any) -> DeviceToleration:
        obj = RawObject(raw)
        key = obj.str("key")
        if key and (problem := label_key_problem(key)):
            raise _fail(problem, "key")
        operator = obj.str("operator", "Equal") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise _fail(f"unknown toleration operator {operator!r} (Equal or Exists)", "operator")
        value = obj.str("value")
        if operator == "Exists" and value:
            raise _fail("must be empty for operator Exists", "value")
        effect = obj.str("effect")
        if effect and effect not in TAINT_EFFECTS:
            raise _fail(f"unknown toleration effect {effect!r} (NoSchedule, NoExecute or None)", "effect")
        return cls(key=key, operator=operator, value=value, effect=effect,
                   toleration_seconds=obj.int("tolerationSeconds"))

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


# --- requests and claims -----------------------------------------------------------------------------------

def _selectors(obj: RawObject, key: str = "selectors") -> tuple[str, ...]:
    items = obj.items(key)
    _check_size(items, MAX_SELECTORS, f"{obj.path}.{key}" if obj.path else key, "selectors")
    out = []
    for item in items:
        if item.data.get("cel") is None:
            raise _fail("a selector needs cel.expression", f"{item.path}.cel")
        cel = item.obj("cel")
        expression = cel.data.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            raise _fail("cel.expression is required", f"{cel.path}.expression")
        if len(expression) > MAX_EXPRESSION:
            raise _fail(f"must be at most {MAX_EXPRESSION} characters", f"{cel.path}.expression")
        out.append(expression)
    return tuple(out)


class ExactRequest(BaseModel):
    """``ExactDeviceRequest`` after the v1 defaults: ``allocationMode`` ExactCount, ``count`` 1."""

    model_config = ConfigDict(frozen=True)

    device_class_name: str
    selectors: tuple[str, ...] = ()
    allocation_mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()
    #: ``capacity.requests``: capacity name → exact amount, sorted by name
    capacity_requests: tuple[tuple[str, Fraction], ...] = ()

    @classmethod
    def fields_of(cls, obj: RawObject, *, sub_request: bool = False) -> dict[str, Any]:
        path = obj.path
        class_name = dns_subdomain(obj.str("deviceClassName"), f"{path}.deviceClassName", "deviceClassName")
        mode = obj.str("allocationMode") or "ExactCount"
        if mode not in ("ExactCount", "All"):
            raise _fail(f"unknown allocationMode {mode!r} (ExactCount or All)", f"{path}.allocationMode")
        count = obj.int("count", 0) or 0
        if mode == "All":
            if count:
                raise _fail("must not be specified when allocationMode is 'All'", f"{path}.count")
        elif count < 0:
            raise _fail("must be greater than zero", f"{path}.count")
        tolerations = obj.parse_each("tolerations", DeviceToleration.parse)
        _check_size(tolerations, MAX_TOLERATIONS, f"{path}.tolerations", "tolerations")
        capacity = obj.obj("capacity")
        requests = capacity.obj("requests")
        amounts = []
        for name, text in requests.data.items():  # the API server does not check these names
            amounts.append((str(name), parse_quantity(_quantity(text, f"{requests.path}.{name}"))))
        fields: dict[str, Any] = {
            "device_class_name": class_name, "selectors": _selectors(obj), "allocation_mode": mode,
            "count": 0 if mode == "All" else count or 1, "tolerations": tuple(tolerations),
            "capacity_requests": tuple(sorted(amounts)),
        }
        if not sub_request:
            fields["admin_access"] = obj.bool("adminAccess")
        return fields

    def capacity_request(self, name: str) -> Fraction | None:
        return dict(self.capacity_requests).get(name)


class SubRequest(ExactRequest):
    """One ``firstAvailable`` alternative (no ``adminAccess``: sub-requests have none)."""

    name: str


class DeviceRequest(BaseModel):
    """A claim's request: exactly one of ``exactly`` or ``firstAvailable`` (tried in list order)."""

    model_config = ConfigDict(frozen=True)

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[SubRequest, ...] = ()

    @classmethod
    def parse(cls, raw: Any) -> DeviceRequest:
        obj = RawObject(raw)
        name = dns_label(obj.str("name"), "name", "request name")
        has_exactly = obj.data.get("exactly") is not None
        alternatives = obj.items("firstAvailable")
        if has_exactly == bool(alternatives):
            raise InputError("exactly one of `exactly` or `firstAvailable` is required"
                             + (", but both are set" if has_exactly else ""))
        if has_exactly:
            return cls(name=name, exactly=ExactRequest(**ExactRequest.fields_of(obj.obj("exactly"))))
        _check_size(alternatives, MAX_SUBREQUESTS, "firstAvailable", "firstAvailable entries")
        subs = []
        for item in alternatives:
            sub_name = dns_label(item.str("name"), f"{item.path}.name", "subrequest name")
            subs.append(SubRequest(name=sub_name, **ExactRequest.fields_of(item, sub_request=True)))
        _unique(((s.name, f"firstAvailable[{i}].name") for i, s in enumerate(subs)), "subrequest name")
        return cls(name=name, first_available=tuple(subs))

    def alternatives(self) -> tuple[tuple[str, ExactRequest], ...]:
        """``(reference, request)`` in the order the allocator tries them: ``("gpu", exactly)`` or
        ``("gpu/big", sub), ("gpu/small", sub)``; the reference is what results and constraints name."""
        if self.exactly is not None:
            return ((self.name, self.exactly),)
        return tuple((f"{self.name}/{sub.name}", sub) for sub in self.first_available)


class DeviceConstraint(BaseModel):
    """``matchAttribute`` (equal on all devices of ``requests``) or ``distinctAttribute`` (all differ);
    empty ``requests`` means every request of the claim. Exactly one is set here: the API server accepts
    both, and then the allocator applies ``matchAttribute`` alone."""

    model_config = ConfigDict(frozen=True)

    requests: tuple[str, ...] = ()
    match_attribute: str = ""
    distinct_attribute: str = ""


def _request_ref(name: str, field: str, names: Mapping[str, frozenset[str]]) -> str:
    parts = name.split("/")
    if len(parts) > 2 or parts[0] not in names or (len(parts) == 2 and parts[1] not in names[parts[0]]):
        raise _fail(f"{name!r} must be the name of a request in the claim or a request and one of its "
                    "subrequests separated by '/'", field)
    return name


class ClaimSpec(BaseModel):
    """``ResourceClaimSpec.devices``. ``config`` (opaque driver parameters) does not affect placement and
    is not kept."""

    model_config = ConfigDict(frozen=True)

    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[DeviceConstraint, ...] = ()

    @classmethod
    def parse(cls, raw: Any) -> ClaimSpec:
        devices = RawObject(raw).obj("devices")
        requests = devices.parse_each("requests", DeviceRequest.parse)
        _check_size(requests, MAX_REQUESTS, "devices.requests", "requests")
        _unique(((r.name, f"devices.requests[{i}].name") for i, r in enumerate(requests)), "request name")
        names = {r.name: frozenset(s.name for s in r.first_available) for r in requests}
        constraints = []
        items = devices.items("constraints")
        _check_size(items, MAX_CONSTRAINTS, "devices.constraints", "constraints")
        for item in items:
            refs = [_request_ref(str(r), f"{item.path}.requests[{i}]", names)
                    for i, r in enumerate(item.data.get("requests") or [])]
            _unique(((r, f"{item.path}.requests[{i}]") for i, r in enumerate(refs)), "request")
            match, distinct = item.str("matchAttribute"), item.str("distinctAttribute")
            if not match and not distinct:
                raise _fail("one of matchAttribute or distinctAttribute is required", item.path)
            if match:  # with both set, the API server checks and the allocator applies matchAttribute only
                fully_qualified_name(match, f"{item.path}.matchAttribute")
                distinct = ""
            else:
                fully_qualified_name(distinct, f"{item.path}.distinctAttribute")
            constraints.append(DeviceConstraint(requests=tuple(refs), match_attribute=match,
                                                distinct_attribute=distinct))
        configs = devices.items("config")
        _check_size(configs, MAX_CONFIGS, "devices.config", "config entries")
        for item in configs:
            for i, ref in enumerate(item.data.get("requests") or []):
                _request_ref(str(ref), f"{item.path}.requests[{i}]", names)
        return cls(requests=tuple(requests), constraints=tuple(constraints))

    def request(self, name: str) -> DeviceRequest | None:
        return next((r for r in self.requests if r.name == name), None)


class DeviceID(NamedTuple):
    """A device as the allocator names it: driver, pool, device."""

    driver: str
    pool: str
    device: str


class AllocationResult(BaseModel):
    """One ``status.allocation.devices.results`` entry."""

    model_config = ConfigDict(frozen=True)

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool = False
    share_id: str = ""
    consumed_capacity: tuple[tuple[str, Fraction], ...] = ()

    @property
    def device_id(self) -> DeviceID:
        return DeviceID(self.driver, self.pool, self.device)

    @classmethod
    def parse(cls, raw: Any) -> AllocationResult:
        obj = RawObject(raw)
        share_id = obj.str("shareID")
        if share_id and not _UUID.match(share_id):
            raise _fail(f"shareID {share_id!r} must be a lower-case RFC 4122 UUID", "shareID")
        consumed = obj.obj("consumedCapacity")
        amounts = tuple(sorted((str(name), parse_quantity(_quantity(text, f"consumedCapacity.{name}")))
                               for name, text in consumed.data.items()))
        return cls(request=obj.str("request") or _missing("request"),
                   driver=driver_name(obj.str("driver"), "driver"),
                   pool=pool_name(obj.str("pool"), "pool"),
                   device=dns_label(obj.str("device"), "device", "device name"),
                   admin_access=obj.bool("adminAccess"), share_id=share_id, consumed_capacity=amounts)


def _missing(field: str) -> str:
    raise _fail(f"{field} is required", field)


class Allocation(BaseModel):
    """``status.allocation``: the devices and the nodes they are reachable from."""

    model_config = ConfigDict(frozen=True)

    results: tuple[AllocationResult, ...] = ()
    #: ``nodeSelector`` in API shape (None: reachable from every node)
    node_selector: dict[str, Any] | None = None

    def node_terms(self) -> tuple[Requirements, ...]:
        return node_terms(self.node_selector)

    @property
    def node_name(self) -> str:
        """The node of a node-local allocation (``matchFields metadata.name In [node]``, the selector the
        allocator writes as soon as one device is node-local), else ""."""
        terms = (self.node_selector or {}).get("nodeSelectorTerms") or []
        if len(terms) != 1 or terms[0].get("matchExpressions"):
            return ""
        fields = terms[0].get("matchFields") or []
        if len(fields) == 1 and fields[0].get("key") == "metadata.name" and fields[0].get("operator") == "In" \
                and len(fields[0].get("values") or []) == 1:
            return str(fields[0]["values"][0])
        return ""


class ConsumerRef(BaseModel):
    """A ``status.reservedFor`` entry (a pod, usually)."""

    model_config = ConfigDict(frozen=True)

    api_group: str = ""
    resource: str
    name: str
    uid: str


class ResourceClaim(BaseModel):
    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    uid: str = ""
    spec: ClaimSpec
    allocation: Allocation | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    #: the controlling owner (a generated claim is owned by its pod): (kind, name, uid)
    owner: tuple[str, str, str] | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def allocated(self) -> bool:
        return self.allocation is not None

    def reserved_for_pod(self, pod: Pod) -> bool:
        return any(ref.resource == "pods" and not ref.api_group and ref.name == pod.name
                   and (not pod.uid or not ref.uid or ref.uid == pod.uid) for ref in self.reserved_for)

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ResourceClaim:
        obj = RawObject(raw)
        meta = obj.obj("metadata")
        dns_subdomain(meta.str("name"), "metadata.name")
        spec = obj.parse("spec", ClaimSpec.parse)
        status = obj.obj("status")
        allocation = None
        if status.data.get("allocation") is not None:
            alloc = status.obj("allocation")
            devices = alloc.obj("devices")
            results = devices.parse_each("results", AllocationResult.parse)
            _check_size(results, MAX_RESULTS, f"{devices.path}.results", "results")
            names = {r.name: frozenset(s.name for s in r.first_available) for r in spec.requests}
            for i, result in enumerate(results):
                _request_ref(result.request, f"{devices.path}.results[{i}].request", names)
            allocation = Allocation(results=tuple(results), node_selector=_node_selector(alloc, "nodeSelector"))
        reserved = []
        items = status.items("reservedFor")
        _check_size(items, MAX_RESERVED_FOR, "status.reservedFor", "reservedFor entries")
        for item in items:
            for key in ("resource", "name", "uid"):
                if not item.str(key):
                    raise _fail(f"{key} is required", f"{item.path}.{key}")
            reserved.append(ConsumerRef(api_group=item.str("apiGroup"), resource=item.str("resource"),
                                        name=item.str("name"), uid=item.str("uid")))
        owners = meta.items("ownerReferences")
        controller = next((o for o in owners if o.bool("controller")), None)
        return cls(namespace=meta.str("namespace", "default") or "default", name=meta.str("name"),
                   uid=meta.str("uid"), spec=spec, allocation=allocation, reserved_for=tuple(reserved),
                   owner=(controller.str("kind"), controller.str("name"), controller.str("uid"))
                   if controller else None)


class ResourceClaimTemplate(BaseModel):
    """A template the claim controller stamps one claim per pod from (``spec.spec``)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    spec: ClaimSpec

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ResourceClaimTemplate:
        obj = RawObject(raw)
        meta = obj.obj("metadata")
        dns_subdomain(meta.str("name"), "metadata.name")
        return cls(namespace=meta.str("namespace", "default") or "default", name=meta.str("name"),
                   spec=obj.obj("spec").parse("spec", ClaimSpec.parse))


def _extended_resource_problem(name: str) -> str | None:
    """Kubernetes' IsExtendedResourceName: domain-qualified, outside kubernetes.io, a valid quota name."""
    domain = name.partition("/")[0]
    if "/" not in name or domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return "must be a domain-qualified name outside kubernetes.io (an extended resource name)"
    if name.startswith("requests."):
        return "must not start with 'requests.'"
    if label_key_problem(f"requests.{name}"):
        return "must be a valid extended resource name"
    return None


class DeviceClass(BaseModel):
    """Selectors every request of the class adds (ANDed with the request's); config kept opaque."""

    model_config = ConfigDict(frozen=True)

    name: str
    selectors: tuple[str, ...] = ()
    #: ``spec.config[].opaque`` as written (``{driver, parameters}``): passed to drivers, not read here
    config: tuple[dict[str, Any], ...] = ()
    extended_resource_name: str = ""

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> DeviceClass:
        obj = RawObject(raw)
        name = dns_subdomain(obj.obj("metadata").str("name"), "metadata.name")
        spec = obj.obj("spec")
        configs = spec.items("config")
        _check_size(configs, MAX_CONFIGS, "spec.config", "config entries")
        opaque = []
        for item in configs:
            if item.data.get("opaque") is None:
                raise _fail("opaque is required", f"{item.path}.opaque")
            driver_name(item.obj("opaque").str("driver"), f"{item.path}.opaque.driver")
            opaque.append(dict(item.obj("opaque").data))
        extended = spec.str("extendedResourceName")
        if extended and (problem := _extended_resource_problem(extended)):
            raise _fail(f"extendedResourceName {extended!r} {problem}", "spec.extendedResourceName")
        return cls(name=name, selectors=_selectors(spec), config=tuple(opaque), extended_resource_name=extended)


# --- slices ------------------------------------------------------------------------------------------------

def _attribute(raw: Any, field: str) -> dict[str, str | int | bool]:
    if not isinstance(raw, Mapping):
        raise _fail("expected a DeviceAttribute ({int|bool|string|version: value})", field)
    listed = [k for k in LIST_ATTRIBUTE_TYPES if raw.get(k) is not None]
    if listed:
        raise _fail(f"list-typed attribute {listed[0]!r} needs the alpha DRAListTypeAttributes feature, off "
                    "in Kubernetes 1.36", field)
    present = [k for k in ATTRIBUTE_TYPES if raw.get(k) is not None]
    if len(present) != 1:
        raise _fail("exactly one of int, bool, string or version must be specified", field)
    kind = present[0]
    value = raw[kind]
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
            raise _fail(f"expected a 64-bit integer, got {value!r}", f"{field}.int")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise _fail(f"expected true or false, got {value!r}", f"{field}.bool")
    else:
        if not isinstance(value, str):
            raise _fail(f"expected a string, got {value!r}", f"{field}.{kind}")
        if len(value) > MAX_ATTRIBUTE_VALUE:
            raise _fail(f"must be at most {MAX_ATTRIBUTE_VALUE} characters", f"{field}.{kind}")
        if kind == "version" and not _SEMVER.match(value):
            raise _fail(f"{value!r} must be a semantic version (semver.org 2.0.0)", f"{field}.version")
    return {kind: value}


class CapacityRequestPolicy(BaseModel):
    """How a multi-allocatable device's capacity is handed out: requests are rounded up to a valid value."""

    model_config = ConfigDict(frozen=True)

    default: str | None = None
    valid_values: tuple[str, ...] = ()
    #: ``validRange``: (min, max or None, step or None)
    valid_range: tuple[str, str | None, str | None] | None = None

    def api(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.default is not None:
            out["default"] = self.default
        if self.valid_values:
            out["validValues"] = list(self.valid_values)
        if self.valid_range is not None:
            low, high, step = self.valid_range
            out["validRange"] = {"min": low, **({"max": high} if high else {}), **({"step": step} if step else {})}
        return out

    @classmethod
    def parse(cls, obj: RawObject, capacity: Fraction) -> CapacityRequestPolicy:
        """The API server's checks (validateRequestPolicy): one of validValues / validRange, each with a
        default, values ascending within the capacity, the default among them or on the range's grid."""
        path = obj.path
        default = _quantity(obj.data["default"], f"{path}.default") if obj.data.get("default") is not None else None
        values_raw = obj.data.get("validValues") or []
        has_range = obj.data.get("validRange") is not None
        if values_raw and has_range:
            raise _fail("exactly one policy can be specified, not validValues and validRange", path)
        if (values_raw or has_range) and default is None:
            raise _fail(f"required when {'validValues' if values_raw else 'validRange'} is defined", f"{path}.default")
        dflt = parse_quantity(default) if default is not None else None
        if values_raw:
            if not isinstance(values_raw, list):
                raise _fail("expected a list of quantities", f"{path}.validValues")
            _check_size(values_raw, MAX_VALID_VALUES, f"{path}.validValues", "valid values")
            values = [_quantity(v, f"{path}.validValues[{i}]") for i, v in enumerate(values_raw)]
            amounts = [parse_quantity(v) for v in values]
            for i, amount in enumerate(amounts):
                field = f"{path}.validValues[{i}]"
                if i and amount < amounts[i - 1]:
                    raise _fail("values must be sorted in ascending order", field)
                if amount in amounts[:i]:
                    raise _fail(f"duplicate value {values[i]!r}", field)
                if amount > capacity:
                    raise _fail("option is larger than the capacity value", field)
            if dflt not in amounts:
                raise _fail("default value is not one of validValues", f"{path}.validValues")
            return cls(default=default, valid_values=tuple(values))
        if has_range:
            rng = obj.obj("validRange")
            if rng.data.get("min") is None:
                raise _fail("required when validRange is defined", f"{rng.path}.min")
            low = _quantity(rng.data["min"], f"{rng.path}.min")
            high = _quantity(rng.data["max"], f"{rng.path}.max") if rng.data.get("max") is not None else None
            step = _quantity(rng.data["step"], f"{rng.path}.step") if rng.data.get("step") is not None else None
            lo = parse_quantity(low)
            assert dflt is not None
            if lo > capacity:
                raise _fail("min is larger than the capacity value", f"{rng.path}.min")
            if dflt < lo:
                raise _fail("default is less than min", f"{rng.path}.min")
            if high is not None:
                hi = parse_quantity(high)
                if lo > hi:
                    raise _fail("min is larger than max", f"{rng.path}.max")
                if hi > capacity:
                    raise _fail("max is larger than the capacity value", f"{rng.path}.max")
                if dflt > hi:
                    raise _fail("default is more than max", f"{rng.path}.max")
            if step is not None:
                st = parse_quantity(step)
                if st <= 0:
                    raise _fail("step must be positive", f"{rng.path}.step")
                if lo + st > capacity:
                    raise _fail("one step from min is larger than the capacity value", f"{rng.path}.step")
                for value in (dflt, parse_quantity(high) if high is not None else None):
                    if value is not None and (value - lo) % st:
                        raise _fail("default and max must be min plus a multiple of step", f"{rng.path}.step")
            return cls(default=default, valid_range=(low, high, step))
        return cls(default=default)


class DeviceCapacity(BaseModel):
    """``DeviceCapacity``: ``value`` as written, and the request policy of a multi-allocatable device."""

    model_config = ConfigDict(frozen=True)

    value: str
    request_policy: CapacityRequestPolicy | None = None

    @property
    def amount(self) -> Fraction:
        return parse_quantity(self.value)

    def api(self) -> dict[str, Any]:
        if self.request_policy is None:
            return {"value": self.value}
        return {"value": self.value, "requestPolicy": self.request_policy.api()}


class CounterSet(BaseModel):
    """A named set of counters partitions draw from (``sharedCounters[]``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    counters: dict[str, str]

    def amounts(self) -> dict[str, Fraction]:
        return {k: parse_quantity(v) for k, v in self.counters.items()}

    def api(self) -> dict[str, Any]:
        return {"name": self.name, "counters": {k: {"value": v} for k, v in self.counters.items()}}


class CounterConsumption(BaseModel):
    """What a device takes from one counter set when allocated (``consumesCounters[]``)."""

    model_config = ConfigDict(frozen=True)

    counter_set: str
    counters: dict[str, str]

    def amounts(self) -> dict[str, Fraction]:
        return {k: parse_quantity(v) for k, v in self.counters.items()}

    def api(self) -> dict[str, Any]:
        return {"counterSet": self.counter_set, "counters": {k: {"value": v} for k, v in self.counters.items()}}


def _counters(obj: RawObject, field: str) -> dict[str, str]:
    counters = obj.obj("counters")
    if not counters.data:
        raise _fail("at least one counter is required", counters.path)
    _check_size(list(counters.data), MAX_COUNTERS, counters.path, "counters")
    out = {}
    for name, raw in counters.data.items():
        path = f"{counters.path}.{name}"
        dns_label(str(name), path, "counter name")
        if not isinstance(raw, Mapping) or raw.get("value") is None:
            raise _fail("a counter needs a value", path)
        out[str(name)] = _quantity(raw["value"], f"{path}.value")
    return out


def _counter_set(raw: Any) -> CounterSet:
    obj = RawObject(raw)
    return CounterSet(name=dns_label(obj.str("name"), "name", "counter set name"), counters=_counters(obj, "counters"))


class Device(BaseModel):
    """One device of a slice. ``driver`` is the slice's: the CEL environment and attribute lookups need it."""

    model_config = ConfigDict(frozen=True)

    name: str
    driver: str
    attributes: dict[str, dict[str, str | int | bool]] = {}
    capacity: dict[str, DeviceCapacity] = {}
    allow_multiple_allocations: bool = False
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()
    binds_to_node: bool = False
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    #: per-device node selection (only with the slice's ``perDeviceNodeSelection``)
    node_name: str = ""
    node_selector: dict[str, Any] | None = None
    all_nodes: bool = False

    def cel_input(self) -> tuple[str, dict[str, dict[str, Any]], dict[str, dict[str, Any]], bool]:
        """``(driver, attributes, capacity, allow_multiple_allocations)`` in API shape, what
        ``model.dracel.DeviceInput`` takes."""
        return (self.driver, {k: dict(v) for k, v in self.attributes.items()},
                {k: c.api() for k, c in self.capacity.items()}, self.allow_multiple_allocations)

    def attribute(self, name: str) -> str | int | bool | None:
        """An attribute's value by fully qualified name, as the allocator looks it up for constraints: the
        exact key, else the bare name when the domain is this device's driver."""
        found = self.attributes.get(name)
        domain, _, ident = name.rpartition("/")
        if found is None and domain == self.driver:
            found = self.attributes.get(ident)
        return next(iter(found.values())) if found else None

    def api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name}
        if self.attributes:
            out["attributes"] = {k: dict(v) for k, v in self.attributes.items()}
        if self.capacity:
            out["capacity"] = {k: c.api() for k, c in self.capacity.items()}
        if self.allow_multiple_allocations:
            out["allowMultipleAllocations"] = True
        if self.consumes_counters:
            out["consumesCounters"] = [c.api() for c in self.consumes_counters]
        if self.taints:
            out["taints"] = [t.api() for t in self.taints]
        if self.binds_to_node:
            out["bindsToNode"] = True
        if self.binding_conditions:
            out["bindingConditions"] = list(self.binding_conditions)
        if self.binding_failure_conditions:
            out["bindingFailureConditions"] = list(self.binding_failure_conditions)
        if self.node_name:
            out["nodeName"] = self.node_name
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector
        if self.all_nodes:
            out["allNodes"] = True
        return out

    @classmethod
    def parse(cls, raw: Any, *, driver: str, per_device_node_selection: bool = False) -> Device:
        obj = RawObject(raw)
        name = dns_label(obj.str("name"), "name", "device name")
        attrs_obj, capacity_obj = obj.obj("attributes"), obj.obj("capacity")
        if len(attrs_obj.data) + len(capacity_obj.data) > MAX_ATTRIBUTES_AND_CAPACITIES:
            raise InputError(f"the total number of attributes and capacities must not exceed "
                             f"{MAX_ATTRIBUTES_AND_CAPACITIES}")
        attributes = {}
        for key, value in attrs_obj.data.items():
            field = f"attributes.{key}"
            attributes[qualified_name(str(key), field)] = _attribute(value, field)
        multi = obj.bool("allowMultipleAllocations")
        capacity = {}
        for key, value in capacity_obj.data.items():
            field = f"capacity.{key}"
            qualified_name(str(key), field)
            if not isinstance(value, Mapping) or value.get("value") is None:
                raise _fail("a capacity needs a value", field)
            amount = _quantity(value["value"], f"{field}.value")
            policy = None
            if value.get("requestPolicy") is not None:
                if not multi:
                    raise _fail("a requestPolicy needs allowMultipleAllocations: true", f"{field}.requestPolicy")
                policy = CapacityRequestPolicy.parse(capacity_obj.obj(str(key)).obj("requestPolicy"),
                                                     parse_quantity(amount))
            capacity[str(key)] = DeviceCapacity(value=amount, request_policy=policy)
        consumptions = []
        for item in obj.items("consumesCounters"):
            counter_set = dns_label(item.str("counterSet"), f"{item.path}.counterSet", "counterSet")
            consumptions.append(CounterConsumption(counter_set=counter_set, counters=_counters(item, "counters")))
        _check_size(consumptions, MAX_CONSUMPTIONS, "consumesCounters", "counter consumptions")
        _unique(((c.counter_set, f"consumesCounters[{i}].counterSet") for i, c in enumerate(consumptions)),
                "counterSet")
        taints = obj.parse_each("taints", DeviceTaint.parse)
        _check_size(taints, MAX_DEVICE_TAINTS, "taints", "taints")
        node_name = obj.str("nodeName")
        selector = _node_selector(obj, "nodeSelector")
        all_nodes = _true_or_unset(obj, "allNodes")
        placed = sum((bool(node_name), selector is not None, all_nodes))
        if per_device_node_selection and placed != 1:
            raise InputError("exactly one of nodeName, nodeSelector or allNodes is required when the slice sets "
                             "perDeviceNodeSelection")
        if not per_device_node_selection and placed:
            raise InputError("nodeName, nodeSelector and allNodes can only be set on a device if the slice sets "
                             "perDeviceNodeSelection")
        if node_name:
            dns_subdomain(node_name, "nodeName", "node name")
        return cls(name=name, driver=driver, attributes=attributes, capacity=capacity,
                   allow_multiple_allocations=multi, consumes_counters=tuple(consumptions), taints=tuple(taints),
                   binds_to_node=obj.bool("bindsToNode"), binding_conditions=_conditions(obj, "bindingConditions"),
                   binding_failure_conditions=_conditions(obj, "bindingFailureConditions"),
                   node_name=node_name, node_selector=selector, all_nodes=all_nodes)


def _devices(spec: RawObject, driver: str, per_device: bool = False) -> tuple[Device, ...]:
    items = spec.items("devices")
    devices = spec.parse_each("devices", lambda raw: Device.parse(raw, driver=driver,
                                                                  per_device_node_selection=per_device))
    advanced = any(d.taints or d.consumes_counters for d in devices)
    limit = MAX_DEVICES_ADVANCED if advanced else MAX_DEVICES
    _check_size(items, limit, f"{spec.path}.devices" if spec.path else "devices",
                "devices" + (" (with taints or consumed counters)" if advanced else ""))
    _unique(((d.name, f"{spec.path + '.' if spec.path else ''}devices[{i}].name") for i, d in enumerate(devices)),
            "device name")
    return tuple(devices)


def _shared_counters(spec: RawObject) -> tuple[CounterSet, ...]:
    sets = spec.parse_each("sharedCounters", _counter_set)
    prefix = f"{spec.path}." if spec.path else ""
    _check_size(sets, MAX_COUNTER_SETS, f"{prefix}sharedCounters", "counter sets")
    _unique(((s.name, f"{prefix}sharedCounters[{i}].name") for i, s in enumerate(sets)), "counter set name")
    return tuple(sets)


class PoolRef(BaseModel):
    """``spec.pool``: consumers use the highest generation and need ``resource_slice_count`` slices of it."""

    model_config = ConfigDict(frozen=True)

    name: str
    generation: int = 0
    resource_slice_count: int = 1


class ResourceSlice(BaseModel):
    """Devices (or shared counters) one driver publishes for part of a pool; reachable from exactly one of
    ``node_name``, ``node_selector``, ``all_nodes`` or per device (``per_device_node_selection``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    driver: str
    pool: PoolRef
    node_name: str = ""
    node_selector: dict[str, Any] | None = None
    all_nodes: bool = False
    per_device_node_selection: bool = False
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()
    #: the Node owning the slice (``ownerReferences`` kind Node), as drivers publish node-local slices
    owner_node: str = ""

    @property
    def pool_id(self) -> tuple[str, str]:
        return self.driver, self.pool.name

    def reachable_from(self, node_name: str, labels: Mapping[str, str]) -> bool:
        """Is the slice for this node (GatherPools' relevance test; per-device slices: any device)?"""
        if self.shared_counters:
            return True
        if self.per_device_node_selection:
            return any(device_reachable(d, node_name, labels) for d in self.devices)
        return _reachable(self.node_name, self.all_nodes, self.node_selector, node_name, labels)

    def devices_for(self, node_name: str, labels: Mapping[str, str]) -> tuple[Device, ...]:
        if self.per_device_node_selection:
            return tuple(d for d in self.devices if device_reachable(d, node_name, labels))
        return self.devices if self.reachable_from(node_name, labels) else ()

    def api(self, *, owner: Mapping[str, Any] | None = None,
            labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The object to create (``owner``: an ownerReference, e.g. the Node's)."""
        spec: dict[str, Any] = {"driver": self.driver, "pool": {
            "name": self.pool.name, "generation": self.pool.generation,
            "resourceSliceCount": self.pool.resource_slice_count}}
        if self.node_name:
            spec["nodeName"] = self.node_name
        if self.node_selector is not None:
            spec["nodeSelector"] = self.node_selector
        if self.all_nodes:
            spec["allNodes"] = True
        if self.per_device_node_selection:
            spec["perDeviceNodeSelection"] = True
        if self.devices:
            spec["devices"] = [d.api() for d in self.devices]
        if self.shared_counters:
            spec["sharedCounters"] = [c.api() for c in self.shared_counters]
        meta: dict[str, Any] = {"name": self.name}
        if labels:
            meta["labels"] = dict(labels)
        if owner:
            meta["ownerReferences"] = [dict(owner)]
        return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": meta, "spec": spec}

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> ResourceSlice:
        obj = RawObject(raw)
        meta = obj.obj("metadata")
        name = dns_subdomain(meta.str("name"), "metadata.name")
        spec = obj.obj("spec")
        driver = driver_name(spec.str("driver"), "spec.driver")
        pool = spec.obj("pool")
        generation = pool.int("generation", 0) or 0
        count = pool.int("resourceSliceCount", 0) or 0
        if generation < 0:
            raise _fail("must be greater than or equal to zero", "spec.pool.generation")
        if count <= 0:
            raise _fail("must be greater than zero", "spec.pool.resourceSliceCount")
        node_name = spec.str("nodeName")
        if spec.data.get("nodeName") is not None:
            dns_subdomain(node_name, "spec.nodeName", "node name")
        selector = _node_selector(spec, "nodeSelector", one_term=True)
        all_nodes = _true_or_unset(spec, "allNodes")
        per_device = _true_or_unset(spec, "perDeviceNodeSelection")
        placed = [f for f, on in (("nodeName", bool(node_name)), ("nodeSelector", selector is not None),
                                  ("allNodes", all_nodes), ("perDeviceNodeSelection", per_device)) if on]
        if len(placed) != 1:
            raise _fail("exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection is required"
                        + (f", but {', '.join(placed)} are set" if placed else ""), "spec")
        if spec.data.get("devices") is not None and spec.data.get("sharedCounters") is not None:
            raise _fail("only one of sharedCounters or devices is allowed", "spec")
        owner = next((o.str("name") for o in meta.items("ownerReferences")
                      if o.str("kind") == "Node" and o.str("apiVersion") in ("v1", "")), "")
        return cls(name=name, driver=driver,
                   pool=PoolRef(name=pool_name(pool.str("name"), "spec.pool.name"), generation=generation,
                                resource_slice_count=count),
                   node_name=node_name, node_selector=selector, all_nodes=all_nodes,
                   per_device_node_selection=per_device, devices=_devices(spec, driver, per_device),
                   shared_counters=_shared_counters(spec), owner_node=owner)


def _reachable(name: str, all_nodes: bool, selector: Mapping[str, Any] | None, node_name: str,
               labels: Mapping[str, str]) -> bool:
    if name:
        return name == node_name
    if all_nodes:
        return True
    if selector is not None:
        return any(term.matches(labels) for term in node_terms(selector))
    return False


def device_reachable(device: Device, node_name: str, labels: Mapping[str, str]) -> bool:
    return _reachable(device.node_name, device.all_nodes, device.node_selector, node_name, labels)


# --- pools -------------------------------------------------------------------------------------------------

class Pool(BaseModel):
    """A (driver, pool) at its highest generation. Only complete, valid pools are allocated from."""

    model_config = ConfigDict(frozen=True)

    driver: str
    name: str
    generation: int
    #: the slices of that generation, sorted by name (the allocator's device order)
    slices: tuple[ResourceSlice, ...]
    complete: bool
    #: why the pool is unusable ("duplicate device name gpu-0"), "" when valid
    invalid: str = ""

    @property
    def usable(self) -> bool:
        return self.complete and not self.invalid

    @property
    def devices(self) -> tuple[Device, ...]:
        """Every device, in the allocator's order: slices by name, devices as listed."""
        return tuple(d for s in self.slices for d in s.devices)

    def counter_sets(self) -> dict[str, CounterSet]:
        return {c.name: c for s in self.slices for c in s.shared_counters}

    def devices_for(self, node_name: str, labels: Mapping[str, str]) -> tuple[Device, ...]:
        return tuple(d for s in self.slices for d in s.devices_for(node_name, labels))

    def device_id(self, device: Device) -> DeviceID:
        return DeviceID(self.driver, self.name, device.name)


def _pool_problem(slices: Sequence[ResourceSlice]) -> str:
    """GatherPools' validity checks: unique device names, unique counter sets, consumed counters exist."""
    names: set[str] = set()
    for device in (d for s in slices for d in s.devices):
        if device.name in names:
            return f"duplicate device name {device.name}"
        names.add(device.name)
    counter_sets: dict[str, CounterSet] = {}
    for counter_set in (c for s in slices for c in s.shared_counters):
        if counter_set.name in counter_sets:
            return f"duplicate counter set name {counter_set.name}"
        counter_sets[counter_set.name] = counter_set
    for device in (d for s in slices for d in s.devices):
        for use in device.consumes_counters:
            found = counter_sets.get(use.counter_set)
            if found is None:
                return f"counter set {use.counter_set} not found"
            missing = next((c for c in use.counters if c not in found.counters), None)
            if missing:
                return f"counter {missing} not found in counter set {use.counter_set}"
    return ""


def gather_pools(slices: Iterable[ResourceSlice]) -> tuple[Pool, ...]:
    """Pools as the structured allocator sees them, sorted by (driver, pool): per pool only the highest
    generation counts; it is complete when ``resourceSliceCount`` slices of that generation exist, and
    invalid when device or counter-set names repeat or a device consumes a counter that does not exist."""
    by_pool: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        current = by_pool.setdefault(s.pool_id, [])
        if current and s.pool.generation < current[0].pool.generation:
            continue
        if current and s.pool.generation > current[0].pool.generation:
            current.clear()
        current.append(s)
    out = []
    for (driver, name), members in sorted(by_pool.items()):
        members.sort(key=lambda s: s.name)
        out.append(Pool(driver=driver, name=name, generation=members[0].pool.generation, slices=tuple(members),
                        complete=len(members) == members[0].pool.resource_slice_count,
                        invalid=_pool_problem(members)))
    return tuple(out)


class AllocatedState(BaseModel):
    """Devices already taken by allocated claims (the scheduler's allocated-devices cache): dedicated
    devices, shares of multi-allocatable devices, and the capacity those shares consume. ``adminAccess``
    results take nothing."""

    model_config = ConfigDict(frozen=True)

    devices: frozenset[DeviceID] = frozenset()
    shares: frozenset[tuple[DeviceID, str]] = frozenset()
    consumed: dict[DeviceID, dict[str, Fraction]] = {}

    def in_use(self, device: DeviceID) -> bool:
        """Taken whole by a claim (no other request may have it, adminAccess aside)."""
        return device in self.devices

    def allocated(self, device: DeviceID) -> bool:
        """Taken whole or shared: an allocated device consumes its counters (once, however many shares)."""
        return device in self.devices or device in self.consumed or any(d == device for d, _ in self.shares)

    def counters_used(self, pool: Pool) -> dict[str, dict[str, Fraction]]:
        """Counter set → counter → amount the pool's allocated devices consume (``sharedCounters`` minus this
        is what partitions can still draw, as the allocator computes it)."""
        used: dict[str, dict[str, Fraction]] = {}
        for device in pool.devices:
            if device.consumes_counters and self.allocated(pool.device_id(device)):
                for use in device.consumes_counters:
                    totals = used.setdefault(use.counter_set, {})
                    for name, amount in use.amounts().items():
                        totals[name] = totals.get(name, Fraction(0)) + amount
        return used


def allocated_state(claims: Iterable[ResourceClaim]) -> AllocatedState:
    devices: set[DeviceID] = set()
    shares: set[tuple[DeviceID, str]] = set()
    consumed: dict[DeviceID, dict[str, Fraction]] = {}
    for claim in claims:
        for result in claim.allocation.results if claim.allocation else ():
            if result.admin_access:
                continue
            if result.share_id:
                shares.add((result.device_id, result.share_id))
                totals = consumed.setdefault(result.device_id, {})
                for name, amount in result.consumed_capacity:
                    totals[name] = totals.get(name, Fraction(0)) + amount
            else:
                devices.add(result.device_id)
    return AllocatedState(devices=frozenset(devices), shares=frozenset(shares), consumed=consumed)


# --- device inventory of an instance type ------------------------------------------------------------------

class SliceTemplate(BaseModel):
    """A ResourceSlice spec minus its node fields: what every node of an instance type publishes (Karpenter's
    ``ResourceSliceTemplate``). ``pool_suffix`` "" puts the slice in the pool named after the node."""

    model_config = ConfigDict(frozen=True)

    driver: str
    pool_suffix: str = ""
    devices: tuple[Device, ...] = ()
    shared_counters: tuple[CounterSet, ...] = ()

    @classmethod
    def parse(cls, raw: Any) -> SliceTemplate:
        obj = RawObject(raw)
        driver = driver_name(obj.str("driver"), "driver")
        suffix = obj.obj("pool").str("name")
        if suffix:
            pool_name(suffix, "pool.name")
        for key in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection"):
            if obj.data.get(key) is not None:
                raise _fail("set by the node that publishes the slice, not in an instance type's inventory", key)
        has_devices, has_counters = bool(obj.items("devices")), bool(obj.items("sharedCounters"))
        if has_devices == has_counters:
            raise InputError("exactly one of devices or sharedCounters is required"
                             + (", but both are set" if has_devices else ""))
        return cls(driver=driver, pool_suffix=suffix, devices=_devices(obj, driver),
                   shared_counters=_shared_counters(obj))


def parse_inventory(items: Sequence[RawObject]) -> tuple[SliceTemplate, ...]:
    """``resourceSlices[]`` of a catalog instance type, checked per pool as the allocator would (unique device
    and counter-set names, consumed counters that exist): a node publishing it gets valid pools."""
    templates = []
    for item in items:
        try:
            templates.append(SliceTemplate.parse(item.data))
        except InputError as err:
            raise err.located(field_prefix=item.path) from None
    pools: dict[tuple[str, str], list[int]] = {}
    for i, t in enumerate(templates):
        pools.setdefault((t.driver, t.pool_suffix), []).append(i)
    for members in pools.values():
        devices = [(d, f"{items[i].path}.devices[{j}]") for i in members for j, d in enumerate(templates[i].devices)]
        _unique(((d.name, f"{path}.name") for d, path in devices), "device name in the pool")
        _unique(((c.name, f"{items[i].path}.sharedCounters[{j}].name") for i in members
                 for j, c in enumerate(templates[i].shared_counters)), "counter set name in the pool")
        counter_sets = {c.name: c for i in members for c in templates[i].shared_counters}
        for device, path in devices:
            for k, use in enumerate(device.consumes_counters):
                where = f"{path}.consumesCounters[{k}]"
                found = counter_sets.get(use.counter_set)
                if found is None:
                    raise _fail(f"counter set {use.counter_set!r} is not in the pool's sharedCounters",
                                f"{where}.counterSet")
                missing = next((c for c in use.counters if c not in found.counters), None)
                if missing:
                    raise _fail(f"counter {missing!r} is not in counter set {use.counter_set!r}",
                                f"{where}.counters.{missing}")
    return tuple(templates)


def _sanitize(driver: str) -> str:
    return re.sub(r"[^a-z0-9.-]", "-", driver.lower()).strip("-.")


def node_slices(templates: Sequence[SliceTemplate], node_name: str) -> tuple[ResourceSlice, ...]:
    """The ResourceSlices a node publishes from its instance type's inventory: ``nodeName`` set, pool
    ``<node>`` (or ``<node>/<suffix>``) at generation 1 counting the templates of that pool, slice names
    ``<node>-<driver>`` (``-<i>`` appended when a driver publishes several)."""
    per_pool: dict[tuple[str, str], int] = {}
    per_driver: dict[str, int] = {}
    for t in templates:
        per_pool[(t.driver, t.pool_suffix)] = per_pool.get((t.driver, t.pool_suffix), 0) + 1
        per_driver[t.driver] = per_driver.get(t.driver, 0) + 1
    seen: dict[str, int] = {}
    out = []
    for t in templates:
        index = seen.get(t.driver, 0)
        seen[t.driver] = index + 1
        name = f"{node_name}-{_sanitize(t.driver)}" + (f"-{index}" if per_driver[t.driver] > 1 else "")
        pool = f"{node_name}/{t.pool_suffix}" if t.pool_suffix else node_name
        out.append(ResourceSlice(
            name=name, driver=t.driver, node_name=node_name, owner_node=node_name,
            pool=PoolRef(name=pool, generation=1, resource_slice_count=per_pool[(t.driver, t.pool_suffix)]),
            devices=t.devices, shared_counters=t.shared_counters))
    return tuple(out)


# --- a pod's claims ----------------------------------------------------------------------------------------

class ResolvedClaim(BaseModel):
    """One entry of a pod's ``spec.resourceClaims`` resolved against the cluster, as the scheduler's
    PreEnqueue/PreFilter read it. ``spec`` is what must be allocated (the template's for a claim not
    generated yet); ``problem`` says why the pod cannot be scheduled because of this claim."""

    model_config = ConfigDict(frozen=True)

    ref: PodClaimRef
    source: Literal["named", "generated", "template"]
    #: ``namespace/name`` of the ResourceClaim this entry uses ("" while a template's claim does not exist)
    claim_key: str = ""
    claim: ResourceClaim | None = None
    spec: ClaimSpec | None = None
    problem: str = ""
    #: pending pods (``namespace/name``) that reference the same ResourceClaim, this pod included
    consumers: tuple[str, ...] = ()

    @property
    def allocated(self) -> bool:
        return self.claim is not None and self.claim.allocated

    @property
    def shared(self) -> bool:
        return len(self.consumers) > 1


class ClaimIndex:
    """The snapshot's claims, templates and classes by key, with the pending pods using each claim.
    Build it once per snapshot state (``Snapshot.claim_index()``) and resolve every pod against it."""

    def __init__(self, pods: Iterable[Pod], claims: Iterable[ResourceClaim],
                 templates: Iterable[ResourceClaimTemplate], classes: Iterable[DeviceClass]) -> None:
        self.claims = {c.key: c for c in claims}
        self.templates = {t.key: t for t in templates}
        self.classes = {c.name: c for c in classes}
        consumers: dict[str, list[str]] = {}
        for pod in pods:
            if pod.pending:
                for ref in pod.resource_claims:
                    key = self.claim_key(pod, ref)
                    if key:
                        consumers.setdefault(key, []).append(pod.key)
        self.consumers = {k: tuple(v) for k, v in consumers.items()}

    @staticmethod
    def claim_key(pod: Pod, ref: PodClaimRef) -> str:
        """The ResourceClaim ``ref`` names for ``pod``: the named claim, or the generated one recorded in
        ``status.resourceClaimStatuses`` ("" when none is recorded yet)."""
        if ref.claim_name:
            return f"{pod.namespace}/{ref.claim_name}"
        generated = dict(pod.claim_statuses).get(ref.name, "")
        return f"{pod.namespace}/{generated}" if generated else ""

    def resolve(self, pod: Pod) -> tuple[ResolvedClaim, ...]:
        return tuple(self._resolve(pod, ref) for ref in pod.resource_claims)

    def _resolve(self, pod: Pod, ref: PodClaimRef) -> ResolvedClaim:
        key = self.claim_key(pod, ref)
        consumers = self.consumers.get(key, ()) if key else ()
        claim = self.claims.get(key) if key else None
        if ref.claim_name:
            if claim is None:
                return ResolvedClaim(ref=ref, source="named", claim_key=key, consumers=consumers,
                                     problem=f"resourceclaim {key} not found")
            return ResolvedClaim(ref=ref, source="named", claim_key=key, claim=claim, spec=claim.spec,
                                 consumers=consumers, problem=_in_use(claim, pod))
        if claim is not None:
            if not _owned_by(claim, pod):
                return ResolvedClaim(ref=ref, source="generated", claim_key=key, claim=claim, consumers=consumers,
                                     problem=f"resourceclaim {key} was not created for pod {pod.key}")
            return ResolvedClaim(ref=ref, source="generated", claim_key=key, claim=claim, spec=claim.spec,
                                 consumers=consumers, problem=_in_use(claim, pod))
        template_key = f"{pod.namespace}/{ref.template_name}"
        template = self.templates.get(template_key)
        if template is None:
            return ResolvedClaim(ref=ref, source="template", problem=f"resourceclaimtemplate {template_key} not found")
        return ResolvedClaim(ref=ref, source="template", spec=template.spec,
                             consumers=(pod.key,) if pod.pending else ())

    def missing_classes(self, spec: ClaimSpec) -> tuple[str, ...]:
        """Device classes the spec's requests name that do not exist (the pod waits for them)."""
        names = [r.device_class_name for req in spec.requests for _, r in req.alternatives()]
        return tuple(dict.fromkeys(n for n in names if n not in self.classes))


def _owned_by(claim: ResourceClaim, pod: Pod) -> bool:
    """Was the claim generated for this pod (its controller is the pod: by uid when both are known)?"""
    if claim.owner is None or claim.owner[0] != "Pod":
        return False
    _, name, uid = claim.owner
    return uid == pod.uid if uid and pod.uid else name == pod.name


def _in_use(claim: ResourceClaim, pod: Pod) -> str:
    """PreFilter's "resourceclaim in use": allocated, reservedFor full, and not reserved for this pod."""
    if claim.allocated and len(claim.reserved_for) >= MAX_RESERVED_FOR and not claim.reserved_for_pod(pod):
        return f"resourceclaim {claim.key} in use (reservedFor has {MAX_RESERVED_FOR} consumers)"
    return ""
