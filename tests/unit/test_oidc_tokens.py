"""The ID token checks of the page's OpenID client (signature, issuer, audience, expiry, nonce)
on tokens signed here with a real RSA key; flows used once and bound to their browser."""

from __future__ import annotations

import time
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey

from psirag_kb.config import OIDCConfig
from psirag_kb.web.oidc import OIDCClient, SignInFailed

ISSUER = "https://id.example.org/realms/acme"


def client(key: RSAKey) -> OIDCClient:
    made = OIDCClient(OIDCConfig(issuer=ISSUER, client_id="kb"), "secret")
    made._metadata = {"issuer": ISSUER, "authorization_endpoint": ISSUER + "/auth",
                      "token_endpoint": ISSUER + "/token", "jwks_uri": ISSUER + "/jwks",
                      "id_token_signing_alg_values_supported": ["RS256"]}
    made._fetched = time.monotonic()
    made._jwks = {"keys": [key.as_dict(private=False)]}
    return made


def signed(key: RSAKey, **changes: Any) -> str:
    now = int(time.time())
    claims = {"iss": ISSUER, "sub": "ana", "aud": "kb", "exp": now + 300, "iat": now,
              "nonce": "n-1", "preferred_username": "ana", "groups": ["/eng", "ops"]}
    claims.update(changes)
    claims = {k: v for k, v in claims.items() if v is not None}
    return jwt.encode({"alg": "RS256", "kid": key.kid}, claims, key)


@pytest.fixture(scope="module")
def key() -> RSAKey:
    made = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    return made


def test_a_good_id_token_gives_the_name_and_groups(key: RSAKey) -> None:
    oidc = client(key)
    claims = oidc.verify(signed(key), "n-1")
    assert oidc.person(claims) == ("ana", ["eng", "ops"])


@pytest.mark.parametrize("changes, nonce", [
    ({"aud": "another-client"}, "n-1"),
    ({"iss": "https://evil.example.org"}, "n-1"),
    ({"exp": int(time.time()) - 3600}, "n-1"),
    ({"nonce": "n-2"}, "n-1"),
    ({"nonce": None}, "n-1"),
    ({"aud": None}, "n-1"),
])
def test_wrong_claims_are_refused(key: RSAKey, changes: dict[str, Any], nonce: str) -> None:
    with pytest.raises(SignInFailed, match="ID token is not valid"):
        client(key).verify(signed(key, **changes), nonce)


def test_a_token_signed_by_another_key_or_unsigned_is_refused(key: RSAKey) -> None:
    other = RSAKey.generate_key(2048, parameters={"kid": "k1"})
    oidc = client(key)
    with pytest.raises(SignInFailed, match="not valid"):
        oidc.verify(signed(other), "n-1")
    header, body, _ = signed(key).split(".")
    with pytest.raises(SignInFailed, match="not valid"):
        oidc.verify(f"{header}.{body}.", "n-1")
    import base64
    import json
    none = base64.urlsafe_b64encode(json.dumps({"alg": "none"}).encode()).rstrip(b"=").decode()
    with pytest.raises(SignInFailed, match="not valid"):
        oidc.verify(f"{none}.{body}.", "n-1")


def test_a_flow_is_used_once_and_only_by_its_browser(key: RSAKey) -> None:
    oidc = client(key)
    url = oidc.start("browser-cookie", "/tree", "http://127.0.0.1:1/auth/callback")
    assert "code_challenge_method=S256" in url and "nonce=" in url
    state = dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))["state"]
    with pytest.raises(SignInFailed, match="another browser"):
        oidc.take(state, "other-cookie")
    with pytest.raises(SignInFailed, match="unknown or expired"):
        oidc.take(state, "browser-cookie")  # the failed attempt used it up
    url = oidc.start("browser-cookie", "/tree", "http://127.0.0.1:1/auth/callback")
    state = dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))["state"]
    assert oidc.take(state, "browser-cookie").back == "/tree"
    with pytest.raises(SignInFailed, match="unknown or expired"):
        oidc.take(state, "browser-cookie")
    with pytest.raises(SignInFailed, match="name_claim"):
        oidc.person({"groups": []})
    with pytest.raises(SignInFailed, match="list of group names"):
        oidc.person({"preferred_username": "ana", "groups": {"eng": 1}})
