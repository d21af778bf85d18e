"""The JAAS login-module text Kafka reads from sasl.jaas.config:
`<class> <flag> key="value" ...;`"""
from __future__ import annotations

import re

_MODULE = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\s*")
_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*("((?:\\.|[^"\\])*)"|[^\s;"]+)\s*')

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"


def parse_jaas(key: str, text: str) -> tuple[str, dict[str, str]]:
    """(login module class, options); ValueError names `key`."""
    text = text.strip()
    m = _MODULE.match(text)
    if not m:
        raise ValueError(f"{key}: expected '<LoginModule> required key=\"value\" ...;'")
    module = m.group(1)
    pos = m.end()
    options: dict[str, str] = {}
    while pos < len(text) and text[pos] != ";":
        o = _OPTION.match(text, pos)
        if not o or o.end() == pos:
            raise ValueError(f"{key}: cannot parse JAAS options at {text[pos:pos + 30]!r}")
        value = o.group(3) if o.group(3) is not None else o.group(2)
        options[o.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = o.end()
    if not text[pos:].strip().startswith(";"):
        raise ValueError(f"{key}: the JAAS configuration must end with ';'")
    if text[pos:].strip() != ";":
        raise ValueError(f"{key}: one login module per value (Kafka's rule)")
    return module, options
