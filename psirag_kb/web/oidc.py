"""OpenID Connect sign-in for the page: authorization code with PKCE, state and nonce, the ID
token's signature, issuer, audience, expiry and nonce checked by Authlib and joserfc.

The provider is asked nothing until someone signs in (a provider that is down makes the sign-in
fail with a clear page, never the daemon's start). Flows in progress live here, keyed by their
`state`, each used once and forgotten after ten minutes.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Any

import requests
from authlib.integrations.requests_client import OAuth2Session
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet
from joserfc.jws import JWSRegistry

from psirag_kb.config import OIDCConfig
from psirag_kb.errors import KBError

log = logging.getLogger(__name__)

TIMEOUT_S = 5.0
"""How long one call to the provider may take."""
FLOW_S = 600.0
"""A sign-in must come back from the provider within this long."""
MAX_FLOWS = 10_000
METADATA_S = 3600.0
"""Discovery is asked again after this long."""
LEEWAY_S = 60
"""Clock difference allowed on the ID token's times."""


class SignInFailed(KBError):
    """A sign-in through the provider that is refused; the message is shown to the person."""


class ProviderDown(SignInFailed):
    """The provider cannot be reached or answers nonsense."""


@dataclass(frozen=True)
class Flow:
    """One sign-in on its way through the provider."""

    nonce: str
    verifier: str
    browser: str
    """SHA-256 of the random value in the browser's pre-sign-in cookie (binds the flow to it)."""
    back: str
    redirect_uri: str
    started: float


def digest(value: str) -> str:
    """SHA-256 hex of a cookie value."""
    return hashlib.sha256(value.encode("utf-8", "surrogateescape")).hexdigest()


class OIDCClient:
    """The page's client of one provider."""

    def __init__(self, config: OIDCConfig, secret: str) -> None:
        self.config = config
        self.issuer = config.issuer
        self.secret = secret
        self._metadata: dict[str, Any] | None = None
        self._fetched = 0.0
        self._jwks: dict[str, Any] | None = None
        self._flows: dict[str, Flow] = {}
        self._lock = threading.Lock()

    # -- the provider's documents -----------------------------------------------------------

    def _get(self, url: str) -> dict[str, Any]:
        try:
            response = requests.get(url, timeout=TIMEOUT_S)
            response.raise_for_status()
            found = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise ProviderDown(f"the identity provider at {self.issuer} cannot be reached "
                               f"({type(exc).__name__}); try again later, or sign in with a "
                               "token") from None
        if not isinstance(found, dict):
            raise ProviderDown(f"the identity provider at {self.issuer} answered nonsense")
        return found

    def metadata(self) -> dict[str, Any]:
        """The provider's discovery document (cached an hour), its issuer checked."""
        if self._metadata is not None and time.monotonic() - self._fetched < METADATA_S:
            return self._metadata
        found = self._get(self.issuer.rstrip("/") + "/.well-known/openid-configuration")
        if found.get("issuer") != self.issuer:
            raise ProviderDown(f"the provider calls itself {found.get('issuer')!r}, not "
                               f"{self.issuer!r} ([auth.oidc] issuer)")
        missing = [k for k in ("authorization_endpoint", "token_endpoint", "jwks_uri")
                   if not isinstance(found.get(k), str)]
        if missing:
            raise ProviderDown(f"the provider's discovery document lacks {', '.join(missing)}")
        self._metadata, self._fetched = found, time.monotonic()
        return found

    def keys(self, force: bool = False) -> KeySet:
        """The provider's signing keys (asked again when a token names an unknown key)."""
        if self._jwks is None or force:
            self._jwks = self._get(self.metadata()["jwks_uri"])
        return KeySet.import_key_set(self._jwks)  # type: ignore[arg-type]

    def _session(self, redirect_uri: str) -> OAuth2Session:
        method = "client_secret_basic" if self.secret else "none"
        return OAuth2Session(self.config.client_id, self.secret or None,
                             token_endpoint_auth_method=method,
                             scope=" ".join(self.config.scopes), redirect_uri=redirect_uri,
                             code_challenge_method="S256")

    # -- the flow ---------------------------------------------------------------------------

    def start(self, browser: str, back: str, redirect_uri: str) -> str:
        """The provider's authorization URL for a new flow bound to the browser's cookie
        value `browser`."""
        metadata = self.metadata()
        state, nonce = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        verifier = secrets.token_urlsafe(64)
        with self._session(redirect_uri) as session:
            url, _ = session.create_authorization_url(
                metadata["authorization_endpoint"], state=state, code_verifier=verifier,
                nonce=nonce)
        with self._lock:
            self._expire()
            if len(self._flows) >= MAX_FLOWS:
                for old in list(self._flows)[: MAX_FLOWS // 10]:
                    del self._flows[old]
            self._flows[state] = Flow(nonce, verifier, digest(browser), back, redirect_uri,
                                      time.monotonic())
        return url

    def _expire(self) -> None:
        now = time.monotonic()
        for state in [s for s, f in self._flows.items() if now - f.started > FLOW_S][:1000]:
            del self._flows[state]

    def take(self, state: str, browser: str | None) -> Flow:
        """The flow of a callback's `state`, forgotten now (a replay finds nothing)."""
        with self._lock:
            flow = self._flows.pop(state, None) if state else None
        if flow is None or time.monotonic() - flow.started > FLOW_S:
            raise SignInFailed("this sign-in is unknown or expired (a forged, replayed or old "
                               "link); sign in again")
        if not browser or not secrets.compare_digest(flow.browser, digest(browser)):
            raise SignInFailed("this sign-in was started in another browser; sign in again")
        return flow

    def finish(self, code: str, flow: Flow) -> dict[str, Any]:
        """The ID token's claims after exchanging `code` (with the PKCE verifier) and checking
        the token's signature, issuer, audience, expiry and nonce."""
        if not code:
            raise SignInFailed("the provider sent no authorization code")
        metadata = self.metadata()
        try:
            with self._session(flow.redirect_uri) as session:
                token = session.fetch_token(metadata["token_endpoint"], code=code,
                                            code_verifier=flow.verifier,
                                            grant_type="authorization_code",
                                            timeout=TIMEOUT_S)
        except requests.RequestException as exc:
            raise ProviderDown(f"the identity provider at {self.issuer} cannot be reached "
                               f"({type(exc).__name__}); try again later") from None
        except Exception as exc:  # noqa: BLE001 - authlib raises its OAuth errors here
            raise SignInFailed(f"the provider refused the sign-in's code "
                               f"({getattr(exc, 'error', None) or type(exc).__name__})") from None
        raw = token.get("id_token")
        if not isinstance(raw, str):
            raise SignInFailed("the provider sent no ID token (is \"openid\" a scope?)")
        return self.verify(raw, flow.nonce, token.get("access_token"))

    def verify(self, raw: str, nonce: str, access_token: str | None = None) -> dict[str, Any]:
        """An ID token's claims once its signature, issuer, audience, expiry and nonce hold."""
        algorithms = self.metadata().get("id_token_signing_alg_values_supported")
        registry = JWSRegistry(algorithms=algorithms, strict_check_header=False)
        try:
            try:
                decoded = jwt.decode(raw, self.keys(), registry=registry)
            except InvalidKeyIdError:
                decoded = jwt.decode(raw, self.keys(force=True), registry=registry)
            params = {"nonce": nonce, "client_id": self.config.client_id}
            if access_token:
                params["access_token"] = access_token
            claims = CodeIDToken(decoded.claims, decoded.header,
                                 {"iss": {"essential": True, "values": [self.issuer]},
                                  "aud": {"essential": True,
                                          "values": [self.config.client_id]}},
                                 params)
            claims.validate(leeway=LEEWAY_S)
        except (JoseError, ValueError) as exc:
            raise SignInFailed(f"the ID token is not valid ({_reason(exc)})") from None
        except Exception as exc:  # noqa: BLE001 - authlib's claim errors
            if type(exc).__module__.startswith(("authlib", "joserfc")):
                raise SignInFailed(f"the ID token is not valid ({_reason(exc)})") from None
            raise
        return dict(claims)

    def person(self, claims: dict[str, Any]) -> tuple[str, list[str]]:
        """(name, groups) from the ID token's claims, as [auth.oidc] names them."""
        name = claims.get(self.config.name_claim)
        if not isinstance(name, str) or not name.strip():
            raise SignInFailed(f"the ID token has no {self.config.name_claim!r} claim "
                               "([auth.oidc] name_claim)")
        groups = claims.get(self.config.groups_claim, [])
        if isinstance(groups, str):
            groups = [groups]
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise SignInFailed(f"the ID token's {self.config.groups_claim!r} claim is not a "
                               "list of group names")
        # Keycloak's group mapper may send full paths ("/engineering"): without the first "/"
        return name.strip(), [g[1:] if g.startswith("/") else g for g in groups if g.strip("/")]


def _reason(exc: Exception) -> str:
    """A short reason for a refused token (never the token)."""
    return str(getattr(exc, "error", "") or getattr(exc, "description", "") or
               type(exc).__name__)[:200]


def read_secret(path: str) -> str:
    """The client secret from [auth.oidc] client_secret_file ("" when none is set)."""
    if not path:
        return ""
    try:
        with open(path, encoding="utf-8") as handle:
            secret = handle.read().strip()
    except OSError as exc:
        raise KBError(f"cannot read [auth.oidc] client_secret_file {path}: {exc}") from exc
    if not secret:
        raise KBError(f"[auth.oidc] client_secret_file {path} is empty")
    return secret
