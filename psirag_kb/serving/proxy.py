"""A trusted sign-in proxy (oauth2-proxy, Authelia, Authentik's outpost): its headers name the
person and their groups, believed only from the peer addresses [auth.proxy] trusted lists."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import Any

from psirag_kb.access import Access
from psirag_kb.config import GroupConfig, ProxyConfig
from psirag_kb.people import People

MAX_GROUPS = 200


class Proxy:
    """Who a request from the proxy is: sign-in (and groups -> grants) on the people registry."""

    def __init__(self, config: ProxyConfig, groups: Sequence[GroupConfig],
                 people: People) -> None:
        self.config = config
        self.groups = tuple(groups)
        self.people = people
        self.networks = tuple(ipaddress.ip_network(t, strict=False) for t in config.trusted)
        self.user_header = config.user_header.lower()
        self.groups_header = config.groups_header.lower()

    def trusted(self, peer: str | None) -> bool:
        """Whether the connection comes from one of the trusted addresses."""
        if not peer:
            return False
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    def access(self, peer: str | None, headers: Any) -> Access | None:
        """The Access the headers name from a trusted peer, None from any other peer or without
        the user header; SignInRefused when their groups grant nothing. `headers` is a
        case-insensitive mapping (Starlette's)."""
        if not self.trusted(peer):
            return None
        user = (headers.get(self.user_header) or "").strip()
        if not user:
            return None
        raw = headers.get(self.groups_header) or "" if self.groups_header else ""
        # oauth2-proxy separates groups with commas, Authentik's outpost with "|"
        groups = [g.strip() for g in re.split(r"[,|]", raw) if g.strip()][:MAX_GROUPS]
        return self.people.sign_in(user, "proxy", groups, self.groups).access
