"""protocol/client_config: the bootstrap list and client properties file,
one reading for the admin CLI and the pipeline."""
import pytest

from kcoord.protocol.client_config import (ClientConfigError, parse_bootstrap, parse_properties,
                                           read_properties)


def test_bootstrap_list():
    assert parse_bootstrap(" a:9092, [::1]:9093,,:9094") == \
        [("a", 9092), ("::1", 9093), ("127.0.0.1", 9094)]
    for bad in ("no-port", "a:x", "", " , "):
        with pytest.raises(ClientConfigError):
            parse_bootstrap(bad)


def test_properties_key_ends_at_the_first_separator(tmp_path):
    text = "# c\n! c\n\na=1\nb : 2\nc:d=3\nsasl.jaas.config=x required a=\"b\";\n"
    assert parse_properties(text) == {"a": "1", "b": "2", "c": "d=3",
                                      "sasl.jaas.config": 'x required a="b";'}
    with pytest.raises(ClientConfigError, match="not a key=value line"):
        parse_properties("just words")
    with pytest.raises(ClientConfigError, match="cannot read"):
        read_properties(tmp_path / "missing.properties")
