"""What a sandbox is created with: every field of E2B's ``NewSandboxV2``
body either honoured or refused with a clear error, never dropped.

Honoured: ``templateID`` (``base`` only: the sandbox runs on this machine's
own filesystem, there are no templates), ``timeout``, ``metadata``,
``envVars``, ``allow_internet_access`` (``false``: the sandbox gets a network
namespace of its own with only loopback), ``network.denyOut`` covering all
traffic (the same as ``allowInternetAccess: false``),
``network.allowPublicTraffic`` (local-e2b serves no sandbox URLs at all, so
no public traffic reaches one either way), ``autoPause: false``,
``autoResume: {enabled: false}``, ``mcp`` (the SDK itself starts the MCP
gateway with a command; this machine has no ``mcp-gateway``, which the SDK
then reports) and ``secure`` (every sandbox is secured: envd always needs its
access token).

Refused (``SandboxError`` 400, "local-e2b does not support ..."): pausing
(``autoPause: true``, ``autoResume`` enabled), egress rules it cannot
enforce (``allowOut``, a ``denyOut`` short of all traffic, DNS servers, an
egress proxy, request host masks, HTTPS ports, transform rules), workload
identity (``iam``), volumes (``volumeMounts``), other templates, and any
field it does not know.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["ALL_TRAFFIC", "MAX_TIMEOUT", "TEMPLATE", "CreateOptions", "OptionError", "parse_create"]

MAX_TIMEOUT = 86_400
DEFAULT_TIMEOUT = 300
TEMPLATE = "base"
"""The one template local-e2b has: this machine's own filesystem."""
ALL_TRAFFIC = "0.0.0.0/0"

_KNOWN = {
    "templateID",
    "timeout",
    "autoPause",
    "autoPauseMemory",
    "autoResume",
    "allow_internet_access",
    "allowInternetAccess",
    "network",
    "metadata",
    "envVars",
    "mcp",
    "iam",
    "volumeMounts",
    "secure",
}
_NETWORK_KNOWN = {
    "allowPublicTraffic",
    "allowOut",
    "denyOut",
    "dnsServers",
    "egressProxy",
    "maskRequestHost",
    "httpsPorts",
    "rules",
}


class OptionError(ValueError):
    """A create request local-e2b refuses: the message says which option
    and why (it names what local-e2b does not support)."""


@attrs.frozen(kw_only=True)
class CreateOptions:
    """A create request as local-e2b honours it."""

    template_id: str
    timeout: int
    metadata: Mapping[str, str]
    env_vars: Mapping[str, str]
    allow_internet_access: bool | None
    """``None``: not said (the sandbox has this machine's network)."""
    network: Mapping[str, Any] | None
    """The honoured ``network`` object, echoed by the sandbox's info."""

    @property
    def isolated_network(self) -> bool:
        """Whether the sandbox gets a network namespace with only loopback."""
        denied = self.network is not None and ALL_TRAFFIC in self.network.get("denyOut", ())
        return self.allow_internet_access is False or denied


def _unsupported(what: str) -> OptionError:
    return OptionError(f"local-e2b does not support {what}")


def _strings(name: str, value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise OptionError(f"{name} must be an object of strings")
    return dict(value)


def _env_vars(value: Any) -> dict[str, str]:
    """Variables every command of the sandbox gets: refused here, by name,
    rather than failing every command later."""
    found = _strings("envVars", value)
    for name, text in found.items():
        if not name or "=" in name or "\0" in name:
            raise OptionError(f"envVars: {name!r} is not a variable name (empty, '=' or NUL)")
        if "\0" in text:
            raise OptionError(f"envVars: the value of {name!r} holds a NUL byte")
    return found


def _network(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise OptionError("network must be an object")
    unknown = sorted(set(value) - _NETWORK_KNOWN)
    if unknown:
        raise _unsupported(f"the network option(s) {', '.join(unknown)}")
    public = value.get("allowPublicTraffic")
    if public is not None and not isinstance(public, bool):
        raise OptionError("network.allowPublicTraffic must be a boolean or null")
    deny = value.get("denyOut") or []
    if not isinstance(deny, list) or not all(isinstance(item, str) for item in deny):
        raise OptionError("network.denyOut must be a list of strings")
    if deny and ALL_TRAFFIC not in deny:
        raise _unsupported(
            "egress rules short of all traffic (network.denyOut without "
            f"{ALL_TRAFFIC}): a sandbox has either this machine's network or only loopback"
        )
    for name, what in (
        ("allowOut", "allowed egress destinations (network.allowOut)"),
        ("dnsServers", "DNS servers for egress rules (network.dnsServers)"),
        ("egressProxy", "an egress proxy (network.egressProxy)"),
        ("maskRequestHost", "request host masks (network.maskRequestHost)"),
        ("httpsPorts", "sandbox URLs and their HTTPS ports (network.httpsPorts)"),
        ("rules", "egress transform rules (network.rules)"),
    ):
        if value.get(name):  # absent, null and empty all ask for nothing
            raise _unsupported(what)
    honoured: dict[str, Any] = {}
    if public is not None:
        honoured["allowPublicTraffic"] = public
    if deny:
        honoured["denyOut"] = [ALL_TRAFFIC]
    return honoured


def parse_create(body: Mapping[str, Any]) -> CreateOptions:
    """The options of a ``NewSandboxV2`` body; :class:`OptionError` names
    the first field that is malformed or that local-e2b does not support."""
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise _unsupported(f"the create option(s) {', '.join(unknown)}")
    template = body.get("templateID")
    if not isinstance(template, str) or not template:
        raise OptionError("templateID must be a non-empty string")
    if body.get("mcp") and template != TEMPLATE:
        raise _unsupported(
            f"MCP servers (mcp=...): the SDK runs them in E2B's {template!r} template, and "
            f"it has only {TEMPLATE!r}"
        )
    if template != TEMPLATE:
        raise _unsupported(
            f"templates: it has only {TEMPLATE!r} (this machine's own filesystem), not {template!r}"
        )
    timeout = body.get("timeout", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
        raise OptionError("timeout must be a non-negative integer (seconds)")
    if timeout > MAX_TIMEOUT:
        raise OptionError(f"timeout cannot be greater than {MAX_TIMEOUT} seconds")
    if body.get("autoPause") not in (None, False):
        raise _unsupported("pausing sandboxes (autoPause, lifecycle on_timeout 'pause')")
    if body.get("autoPauseMemory") not in (None, True, False):
        raise OptionError("autoPauseMemory must be a boolean")
    resume = body.get("autoResume")
    if resume is not None:
        if not isinstance(resume, dict) or not isinstance(resume.get("enabled"), bool):
            raise OptionError("autoResume must be an object with a boolean 'enabled'")
        if resume["enabled"]:
            raise _unsupported("resuming paused sandboxes (autoResume)")
    # The SDK's create body spells it in snake case; sandbox info in camel case.
    internet = body.get("allow_internet_access", body.get("allowInternetAccess"))
    if internet is not None and not isinstance(internet, bool):
        raise OptionError("allow_internet_access must be a boolean")
    if body.get("iam"):
        raise _unsupported("workload identity tokens (iam)")
    if body.get("volumeMounts"):
        raise _unsupported("volumes (volumeMounts)")
    if body.get("mcp") is not None and not isinstance(body["mcp"], dict):
        raise OptionError("mcp must be an object or null")
    if body.get("secure") not in (None, True, False):
        raise OptionError("secure must be a boolean")
    return CreateOptions(
        template_id=template,
        timeout=timeout,
        metadata=_strings("metadata", body.get("metadata")),
        env_vars=_env_vars(body.get("envVars")),
        allow_internet_access=internet,
        network=_network(body.get("network")),
    )
