"""Config APIs: DescribeConfigs (32) v1-4, AlterConfigs (33) v0-2,
IncrementalAlterConfigs (44) v0-1.

DescribeConfigs v1 adds synonyms and a config source, v3 the config type
and documentation; flexible from v4 (v0, deprecated, was removed in 4.0).
AlterConfigs replaces a resource's whole override set; flexible from v2.
IncrementalAlterConfigs carries an operation per key (0 SET, 1 DELETE,
2 APPEND, 3 SUBTRACT); flexible from v1.
"""
from ..schema import api, f

DESCRIBE_CONFIGS = api(32, "DescribeConfigs", "1-4", "4+", request=[
    f("resources", "[]", fields=[
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("configuration_keys", "[]string", null="0+"),
    ]),
    f("include_synonyms", "bool", "1+"),
    f("include_documentation", "bool", "3+"),
], response=[
    f("throttle_time_ms", "int32"),
    f("results", "[]", fields=[
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("configs", "[]", fields=[
            f("name", "string"),
            f("value", "string", null="0+"),
            f("read_only", "bool"),
            f("config_source", "int8", "1+", default=-1),
            f("is_default", "bool", "0"),
            f("is_sensitive", "bool"),
            f("synonyms", "[]", "1+", fields=[
                f("name", "string", "1+"),
                f("value", "string", "1+", null="0+"),
                f("source", "int8", "1+"),
            ]),
            f("config_type", "int8", "3+"),
            f("documentation", "string", "3+", null="0+", default=None),
        ]),
    ]),
])

_ALTER_RESPONSE = [
    f("throttle_time_ms", "int32"),
    f("responses", "[]", fields=[
        f("error_code", "int16"),
        f("error_message", "string", null="0+", default=None),
        f("resource_type", "int8"),
        f("resource_name", "string"),
    ]),
]

ALTER_CONFIGS = api(33, "AlterConfigs", "0-2", "2+", request=[
    f("resources", "[]", fields=[
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("configs", "[]", fields=[
            f("name", "string"),
            f("value", "string", null="0+"),
        ]),
    ]),
    f("validate_only", "bool"),
], response=_ALTER_RESPONSE)

INCREMENTAL_ALTER_CONFIGS = api(44, "IncrementalAlterConfigs", "0-1", "1+", request=[
    f("resources", "[]", fields=[
        f("resource_type", "int8"),
        f("resource_name", "string"),
        f("configs", "[]", fields=[
            f("name", "string"),
            f("config_operation", "int8"),
            f("value", "string", null="0+"),
        ]),
    ]),
    f("validate_only", "bool"),
], response=_ALTER_RESPONSE)
