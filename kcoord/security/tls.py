"""TLS contexts from Kafka's ssl.* settings (PEM key stores as KIP-651), the
mTLS principal (the certificate's subject DN in RFC 2253 form) and
ssl.principal.mapping.rules."""
from __future__ import annotations

import os
import re
import ssl
import tempfile
from pathlib import Path

from .listeners import listener_value

_PEM_BLOCK = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def pem_blocks(text: str) -> list[tuple[str, str]]:
    """(label, whole block) of every PEM block; text around them is ignored."""
    return [(m.group(1), m.group(0)) for m in _PEM_BLOCK.finditer(text)]


def split_keystore(text: str, source: str) -> tuple[list[str], str, str]:
    """(certificates, key label, key block) of a PEM key store: at least one
    certificate and exactly one private key, else an error naming source."""
    blocks = pem_blocks(text)
    certs = [b for label, b in blocks if label == "CERTIFICATE"]
    keys = [(label, b) for label, b in blocks if label.endswith("PRIVATE KEY")]
    if not certs:
        raise ValueError(f"{source}: no certificate in the key store")
    if len(keys) != 1:
        raise ValueError(f"{source}: expected exactly one private key, found {len(keys)}")
    label, key_pem = keys[0]
    return certs, label, key_pem


def read_pem(key: str, path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ValueError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{key}: {path} is not a PEM text file") from None


def _unescape_inline(text: str) -> str:
    # a properties value may keep its newlines as the two characters \n
    return text.replace("\\n", "\n")


def _keystore_pem(get, store: str) -> tuple[str, str]:
    """(certificate chain PEM, private key PEM) from ssl.keystore.*."""
    kind = (get("ssl.keystore.type") or "JKS" if get("ssl.keystore.location") else
            get("ssl.keystore.type") or "PEM").upper()
    location = get("ssl.keystore.location")
    chain = get("ssl.keystore.certificate.chain")
    key = get("ssl.keystore.key")
    if kind != "PEM":
        raise ValueError(f"ssl.keystore.type: {kind} not implemented (kcoord reads PEM "
                         f"key stores, KIP-651: set ssl.keystore.type=PEM)")
    if get("ssl.keystore.password"):
        raise ValueError("ssl.keystore.password: not allowed with ssl.keystore.type=PEM")
    if bool(chain) != bool(key):
        raise ValueError("ssl.keystore.key: ssl.keystore.certificate.chain and "
                         "ssl.keystore.key must be given together")
    if chain and location:
        raise ValueError("ssl.keystore.location: not allowed with an inline "
                         "ssl.keystore.key")
    if chain:
        text = _unescape_inline(chain) + "\n" + _unescape_inline(key)
        source = "ssl.keystore.key"
    elif location:
        text = read_pem("ssl.keystore.location", location)
        source = "ssl.keystore.location"
    else:
        raise ValueError(f"ssl.keystore.location: a TLS listener ({store}) needs a key store "
                         f"(ssl.keystore.location, or ssl.keystore.certificate.chain with "
                         f"ssl.keystore.key)")
    certs, label, key_pem = split_keystore(text, source)
    if label not in ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY"):
        raise ValueError(f"{source}: {label} is not a PKCS#8 key (Kafka loads PKCS#8 keys "
                         f"only: PRIVATE KEY or ENCRYPTED PRIVATE KEY)")
    if label == "ENCRYPTED PRIVATE KEY" and not get("ssl.key.password"):
        raise ValueError("ssl.key.password: required for an ENCRYPTED PRIVATE KEY")
    return "\n".join(certs) + "\n", key_pem + "\n"


def _truststore_pem(get) -> str | None:
    location = get("ssl.truststore.location")
    inline = get("ssl.truststore.certificates")
    kind = (get("ssl.truststore.type") or ("JKS" if location else "PEM")).upper()
    if not location and not inline:
        return None
    if kind != "PEM":
        raise ValueError(f"ssl.truststore.type: {kind} not implemented (kcoord reads PEM "
                         f"trust stores: set ssl.truststore.type=PEM)")
    if get("ssl.truststore.password"):
        raise ValueError("ssl.truststore.password: not allowed with ssl.truststore.type=PEM")
    if location and inline:
        raise ValueError("ssl.truststore.certificates: not allowed with "
                         "ssl.truststore.location")
    text = _unescape_inline(inline) if inline else read_pem("ssl.truststore.location", location)
    certs = [b for label, b in pem_blocks(text) if label == "CERTIFICATE"]
    if not certs:
        key = "ssl.truststore.certificates" if inline else "ssl.truststore.location"
        raise ValueError(f"{key}: no certificate in the trust store")
    return "\n".join(certs) + "\n"


def _load_chain(ctx: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """SSLContext.load_cert_chain reads files only: write a private temporary
    copy, load it, remove it."""
    fd, path = tempfile.mkstemp(prefix="kcoord-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(chain + key)
        ctx.load_cert_chain(path, password=password or None)
    except ssl.SSLError as exc:
        raise ValueError(f"ssl.keystore.key: cannot load the key store: {exc}") from None
    finally:
        os.unlink(path)


def _protocols(ctx: ssl.SSLContext, get) -> None:
    raw = get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3"
    names = [p.strip() for p in str(raw).split(",") if p.strip()]
    bad = [p for p in names if p not in _VERSIONS]
    if bad or not names:
        raise ValueError(f"ssl.enabled.protocols: {', '.join(bad) or 'empty'} not supported "
                         f"(TLSv1.2, TLSv1.3)")
    versions = sorted(_VERSIONS[p] for p in names)
    ctx.minimum_version = versions[0]
    ctx.maximum_version = versions[-1]
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            ctx.set_ciphers(":".join(c.strip() for c in str(ciphers).split(",")))
        except ssl.SSLError:
            raise ValueError(f"ssl.cipher.suites: no usable cipher in {ciphers!r} "
                             f"(OpenSSL names)") from None


def server_context(values: dict, listener: str) -> ssl.SSLContext:
    """The server-side context of one TLS listener; ValueError names the key."""
    def get(key):
        v = listener_value(values, listener, key)
        return None if v is None or str(v) == "" else str(v)

    chain, key = _keystore_pem(get, listener)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols(ctx, get)
    _load_chain(ctx, chain, key, get("ssl.key.password"))
    trust = _truststore_pem(get)
    if trust is not None:
        ctx.load_verify_locations(cadata=trust)
    auth = (get("ssl.client.auth") or "none").lower()
    if auth not in ("none", "requested", "required"):
        raise ValueError(f"ssl.client.auth: {auth!r} is not none, requested or required")
    if listener_value(values, listener, "ssl.client.auth") is not None and \
            values.get(f"listener.name.{listener.lower()}.ssl.client.auth") is None and \
            _is_sasl_ssl(values, listener):
        auth = "none"  # Kafka: on SASL_SSL only the listener-prefixed value applies
    if auth != "none" and trust is None:
        raise ValueError(f"ssl.truststore.location: ssl.client.auth={auth} needs a trust store")
    ctx.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                       "required": ssl.CERT_REQUIRED}[auth]
    PrincipalMapper.parse(get("ssl.principal.mapping.rules") or "DEFAULT")
    return ctx


def _is_sasl_ssl(values: dict, listener: str) -> bool:
    from .listeners import protocol_map
    return protocol_map(values).get(listener.upper()) == "SASL_SSL"


def client_context(props: dict) -> ssl.SSLContext:
    """A client-side context from Kafka client properties (ssl.truststore.*,
    ssl.keystore.* for mTLS, ssl.endpoint.identification.algorithm); for the
    operator CLI and for inter-broker connections."""
    def get(key):
        v = props.get(key)
        return None if v is None or str(v) == "" else str(v)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols(ctx, get)
    trust = _truststore_pem(get)
    if trust is not None:
        ctx.load_verify_locations(cadata=trust)
    else:
        ctx.load_default_certs()
    algo = props.get("ssl.endpoint.identification.algorithm", "https")
    ctx.check_hostname = bool(algo)
    if get("ssl.keystore.location") or get("ssl.keystore.certificate.chain"):
        chain, key = _keystore_pem(get, "client")
        _load_chain(ctx, chain, key, get("ssl.key.password"))
    return ctx


# ------------------------------------------------------------ principals
# RFC 2253 keywords the JDK writes by name; other attributes are OID=#hex
_RFC2253 = {"commonName": "CN", "countryName": "C", "localityName": "L",
            "stateOrProvinceName": "ST", "organizationName": "O",
            "organizationalUnitName": "OU", "streetAddress": "STREET",
            "domainComponent": "DC", "userId": "UID"}
_OIDS = {"emailAddress": ("1.2.840.113549.1.9.1", 0x16)}  # IA5String


def _escape(value: str) -> str:
    out = []
    for i, ch in enumerate(value):
        if ch in ',+"\\<>;' or (ch == "#" and i == 0) or (ch == " " and i in (0, len(value) - 1)):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def subject_dn(peercert: dict) -> str:
    """RFC 2253 DN of a verified peer certificate (ssl getpeercert() form):
    most-specific RDN first, no spaces, as the JDK prints it."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        parts = []
        for name, value in rdn:
            if name in _RFC2253:
                parts.append(f"{_RFC2253[name]}={_escape(value)}")
            elif name in _OIDS:
                oid, tag = _OIDS[name]
                raw = value.encode()
                parts.append(f"{oid}=#{bytes([tag, len(raw)]).hex()}{raw.hex()}")
            else:
                parts.append(f"{name}={_escape(value)}")
        rdns.append("+".join(parts))
    return ",".join(rdns)


class NoMatchingRule(Exception):
    pass


class PrincipalMapper:
    """ssl.principal.mapping.rules: the first rule whose regex matches the
    whole DN maps it (`$n` groups, optional L/U case); DEFAULT keeps it."""
    _RULE = re.compile(r"\s*(DEFAULT|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU])?)\s*(,|$)")

    def __init__(self, rules: list) -> None:
        self.rules = rules

    @classmethod
    def parse(cls, text: str) -> "PrincipalMapper":
        rules = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = cls._RULE.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"ssl.principal.mapping.rules: cannot parse {text[pos:]!r}")
            if m.group(1) == "DEFAULT":
                rules.append(None)
            else:
                try:
                    rules.append((re.compile(m.group(2)), m.group(4), m.group(6)))
                except re.error as exc:
                    raise ValueError(f"ssl.principal.mapping.rules: bad regex "
                                     f"{m.group(2)!r}: {exc}") from None
            pos = m.end()
        return cls(rules or [None])

    def map(self, dn: str) -> str:
        for rule in self.rules:
            if rule is None:
                return dn
            regex, replacement, case = rule
            if regex.fullmatch(dn) is None:
                continue

            def expand(m: re.Match, regex=regex, replacement=replacement) -> str:
                def group(g: re.Match) -> str:
                    n = int(g.group(1))
                    return m.group(n) or "" if n <= (regex.groups or 0) else g.group(0)
                return re.sub(r"\$(\d)", group, replacement)

            result = regex.sub(expand, dn)
            if case == "L":
                result = result.lower()
            elif case == "U":
                result = result.upper()
            return result
        raise NoMatchingRule(f"no ssl.principal.mapping.rules rule matches {dn}")
